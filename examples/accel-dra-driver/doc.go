// Command accel-dra-driver is a DRA driver for an imaginary accelerator, each device allocated
// to one claim at a time: it shows that gpudra's node runtime serves devices other than NVIDIA
// GPUs. Its Driver (driver.go) lists /dev/accel<N>, reserves a device for a claim and hands the
// container its device node; package draplugin/exclusive does the rest (kubelet registration,
// ResourceSlices, checkpoint, CDI specs, crash safety, reconciliation). --root points it at a
// fake device directory, so it runs without hardware:
//
//	accel-dra-driver render --node-name node-1 --root /tmp/fake   # the node's ResourceSlices
//	accel-dra-driver serve --node-name node-1 --root /tmp/fake --kubeconfig ~/.kube/config \
//	    --state-dir /tmp/s --plugin-dir /tmp/p --registrar-dir /tmp/r --cdi-root /tmp/cdi
//
// Claims select devices with DeviceClass selectors such as
// device.driver == "accel.example.com" && device.attributes["accel.example.com"].model == "A1".
package main
