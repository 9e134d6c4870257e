package nodeplugin

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/gpudra/gpudra/computedomain/v1beta1"
)

// NewScheme returns a scheme with client-go's types (Nodes) and the ComputeDomain API, for the
// controller-runtime client that ClientDomains uses.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register client-go's types: %w", err)
	}
	if err := v1beta1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register the ComputeDomain API: %w", err)
	}
	return s, nil
}
