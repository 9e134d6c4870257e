package deviceplugin_test

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/deviceplugin"
)

// Example converts the time-slicing config of NVIDIA's documentation into a DeviceClass that
// serves nvidia.com/gpu through DRA, then checks a node that still runs the device plugin.
func Example() {
	cfg, err := deviceplugin.Parse([]byte(`
version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
`))
	if err != nil {
		panic(err)
	}
	res, err := deviceplugin.Convert(cfg)
	if err != nil {
		panic(err)
	}
	for _, c := range res.Classes {
		fmt.Println(c.Name, *c.Spec.ExtendedResourceName, string(c.Spec.Config[0].Opaque.Parameters.Raw))
	}
	fmt.Println(len(res.Differences), "differences")

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Status: corev1.NodeStatus{
		Capacity: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("32")}}}
	var conflict *deviceplugin.ConflictError
	err = deviceplugin.CheckNode(node)
	fmt.Println(errors.As(err, &conflict), conflict.Evidence)
	// Output:
	// gpu.extended.nvidia.com nvidia.com/gpu {"kind":"GpuConfig","apiVersion":"resource.nvidia.com/v1beta1","sharing":{"strategy":"TimeSlicing"}}
	// 2 differences
	// true [status.capacity nvidia.com/gpu=32]
}
