package nodeplugin

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/computedomain/v1beta1"
)

// ErrDomainNotFound says that no ComputeDomain has the UID a claim's config names.
var ErrDomainNotFound = errors.New("ComputeDomain not found")

// Domains looks up ComputeDomains. A channel prepare reads the domain of its claim once to
// check its clique and then again while it waits for the node's IMEX daemon to be ready.
type Domains interface {
	// Domain returns the ComputeDomain with UID uid in namespace, or an error wrapping
	// ErrDomainNotFound.
	Domain(ctx context.Context, namespace string, uid types.UID) (*v1beta1.ComputeDomain, error)
}

// ClientDomains is Domains over a controller-runtime client (the API server, a cache, or
// client/fake in tests) whose scheme knows ComputeDomains (NewScheme).
type ClientDomains struct {
	c client.Reader
}

var _ Domains = (*ClientDomains)(nil)

// NewClientDomains returns Domains that read through c.
func NewClientDomains(c client.Reader) *ClientDomains { return &ClientDomains{c: c} }

// Domain implements Domains. The API server selects custom resources by name but not by UID,
// so it lists the namespace's domains and picks the one with the UID.
func (d *ClientDomains) Domain(ctx context.Context, namespace string, uid types.UID) (*v1beta1.ComputeDomain, error) {
	var list v1beta1.ComputeDomainList
	if err := d.c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list ComputeDomains in namespace %s: %w", namespace, err)
	}
	for i := range list.Items {
		if list.Items[i].UID == uid {
			return &list.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no ComputeDomain with UID %s in namespace %s: %w", uid, namespace, ErrDomainNotFound)
}
