package imex

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/computedomain/v1beta1"
)

// Domains is what a Daemon needs of the API server.
type Domains interface {
	// Get returns the domain.
	Get(ctx context.Context, key types.NamespacedName) (*v1beta1.ComputeDomain, error)
	// ApplyNode sets node's entry in the domain's status.nodes with server-side apply as
	// fieldManager, forcing ownership of the entry's name, ipAddress, cliqueID and status (and
	// nothing else: the index is the controller's). uid is the domain's: a domain of that name
	// with another UID is not written.
	ApplyNode(ctx context.Context, key types.NamespacedName, uid types.UID, fieldManager string, node v1beta1.ComputeDomainNode) error
	// RemoveNode removes the entry named nodeName from the domain's status.nodes, whoever owns
	// its fields; a missing entry or domain is no error.
	RemoveNode(ctx context.Context, key types.NamespacedName, uid types.UID, fieldManager, nodeName string) error
}

// ClientDomains implements Domains over a controller-runtime client whose scheme has
// v1beta1.AddToScheme: Get reads the domain (through the client's cache, if it has one),
// ApplyNode applies to the status subresource, RemoveNode updates it (with the resource version
// read, retried on conflicts).
type ClientDomains struct {
	// Client is the API client.
	Client client.Client
}

var _ Domains = ClientDomains{}

// Get implements Domains.
func (d ClientDomains) Get(ctx context.Context, key types.NamespacedName) (*v1beta1.ComputeDomain, error) {
	var cd v1beta1.ComputeDomain
	if err := d.Client.Get(ctx, key, &cd); err != nil {
		return nil, fmt.Errorf("get ComputeDomain %s: %w", key, err)
	}
	return &cd, nil
}

// ApplyNode implements Domains. The applied object holds the domain's UID, so that the API
// server refuses it for another domain of the same name.
func (d ClientDomains) ApplyNode(ctx context.Context, key types.NamespacedName, uid types.UID, fieldManager string, node v1beta1.ComputeDomainNode) error {
	gv := v1beta1.GroupVersion()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gv.String(),
		"kind":       v1beta1.Kind,
		"metadata":   map[string]any{"name": key.Name, "namespace": key.Namespace, "uid": string(uid)},
		"status": map[string]any{"nodes": []any{map[string]any{
			"name": node.Name, "ipAddress": node.IPAddress, "cliqueID": node.CliqueID, "status": node.Status,
		}}},
	}}
	err := d.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldManager), client.ForceOwnership)
	if err != nil {
		return fmt.Errorf("apply node %s (%s) to ComputeDomain %s status as %s: %w", node.Name, node.Status, key, fieldManager, err)
	}
	return nil
}

// RemoveNode implements Domains.
func (d ClientDomains) RemoveNode(ctx context.Context, key types.NamespacedName, uid types.UID, fieldManager, nodeName string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cd v1beta1.ComputeDomain
		if err := d.Client.Get(ctx, key, &cd); err != nil {
			return client.IgnoreNotFound(err)
		}
		if cd.UID != uid {
			return nil
		}
		kept := cd.Status.Nodes[:0]
		for _, n := range cd.Status.Nodes {
			if n.Name != nodeName {
				kept = append(kept, n)
			}
		}
		if len(kept) == len(cd.Status.Nodes) {
			return nil
		}
		cd.Status.Nodes = kept
		return client.IgnoreNotFound(d.Client.Status().Update(ctx, &cd, client.FieldOwner(fieldManager)))
	})
	if err != nil {
		return fmt.Errorf("remove node %s from ComputeDomain %s status: %w", nodeName, key, err)
	}
	return nil
}
