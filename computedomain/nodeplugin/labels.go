package nodeplugin

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/computedomain"
)

// ErrNodeServesOtherDomain says that the node already carries the label of another
// ComputeDomain: a node serves one domain at a time.
var ErrNodeServesOtherDomain = errors.New("the node serves another ComputeDomain")

// NodeLabeler sets and removes the node's computedomain.NodeLabel, which puts the domain's IMEX
// daemon DaemonSet on the node.
type NodeLabeler interface {
	// Label sets NodeLabel=domain on the node. It succeeds when the label already names the
	// domain and fails with an error wrapping ErrNodeServesOtherDomain, changing nothing, when
	// it names another.
	Label(ctx context.Context, domain types.UID) error
	// Unlabel removes NodeLabel from the node when it names domain, and leaves it otherwise.
	Unlabel(ctx context.Context, domain types.UID) error
}

// ClientNodeLabeler is NodeLabeler over a controller-runtime client: it reads the Node and
// patches its labels with the resourceVersion it read, so that a label another writer set in
// between is never overwritten (the patch conflicts, and it reads again).
type ClientNodeLabeler struct {
	c    client.Client
	node string
}

var _ NodeLabeler = (*ClientNodeLabeler)(nil)

// NewClientNodeLabeler returns a NodeLabeler of the Node named node.
func NewClientNodeLabeler(c client.Client, node string) *ClientNodeLabeler {
	return &ClientNodeLabeler{c: c, node: node}
}

// Label implements NodeLabeler.
func (l *ClientNodeLabeler) Label(ctx context.Context, domain types.UID) error {
	return l.update(ctx, func(labels map[string]string) (bool, error) {
		switch cur := labels[computedomain.NodeLabel]; cur {
		case string(domain):
			return false, nil
		case "":
			labels[computedomain.NodeLabel] = string(domain)
			return true, nil
		default:
			return false, fmt.Errorf("node %s has label %s=%s, cannot add %s: %w (one domain per node at a time)",
				l.node, computedomain.NodeLabel, cur, domain, ErrNodeServesOtherDomain)
		}
	})
}

// Unlabel implements NodeLabeler.
func (l *ClientNodeLabeler) Unlabel(ctx context.Context, domain types.UID) error {
	return l.update(ctx, func(labels map[string]string) (bool, error) {
		if labels[computedomain.NodeLabel] != string(domain) {
			return false, nil
		}
		delete(labels, computedomain.NodeLabel)
		return true, nil
	})
}

// update reads the Node, lets change edit its labels and patches them when it says it changed
// them, again from a fresh read when the Node changed in between.
func (l *ClientNodeLabeler) update(ctx context.Context, change func(labels map[string]string) (bool, error)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var node corev1.Node
		if err := l.c.Get(ctx, client.ObjectKey{Name: l.node}, &node); err != nil {
			return fmt.Errorf("get node %s: %w", l.node, err)
		}
		orig := node.DeepCopy()
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		changed, err := change(node.Labels)
		if err != nil || !changed {
			return err
		}
		if err := l.c.Patch(ctx, &node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("patch the labels of node %s: %w", l.node, err)
		}
		return nil
	})
}
