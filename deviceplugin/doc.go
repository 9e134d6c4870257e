// Package deviceplugin moves a cluster from NVIDIA's k8s-device-plugin to a DRA driver without
// changing its pods: it converts the device plugin's config file into DeviceClasses whose
// spec.extendedResourceName (KEP-5004, GA in Kubernetes 1.37) makes the scheduler serve
// nvidia.com/gpu, nvidia.com/mig-<profile> and nvidia.com/gpu.shared requests from DRA devices,
// and it detects the device plugin on a node so that a driver never publishes GPUs the device
// plugin already hands out.
//
// # Converting a config
//
// Parse reads the device plugin's config file (version v1) and checks it as the device plugin
// does. Convert maps its MIG strategy and sharing section to classes:
//
//   - migStrategy none: nvidia.com/gpu is served by full GPUs;
//   - single: nvidia.com/gpu by full GPUs and MIG devices of any profile;
//   - mixed: nvidia.com/gpu by full GPUs, and each MIG profile by a class of its own,
//     nvidia.com/mig-1g.10gb by 1g.10gb MIG devices ("+" written as ".": mig-1g.10gb.me);
//   - sharing.timeSlicing: the class carries a resource.nvidia.com/v1beta1 config with strategy
//     TimeSlicing; sharing.mps: strategy MPS, each client limited to 100/replicas percent of
//     the multiprocessors; renameByDefault: the class serves <name>.shared instead.
//
// Replicas have no exact DRA equivalent: the scheduler gives each pod's extended resources one
// claim, and a device goes to one claim, so N replicas no longer let N pods share a GPU.
// Result.Differences lists this and every other difference, one sentence each.
//
//	cfg, err := deviceplugin.Parse(configFile)
//	res, err := deviceplugin.Convert(cfg)
//	for _, c := range res.Classes {
//		_, err = client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{})
//	}
//	for _, d := range res.Differences {
//		fmt.Println("note:", d)
//	}
//
// # Guarding a node
//
// CheckNode looks for the device plugin in a Node's status (nvidia.com/ resources above zero in
// capacity or allocatable), CheckSocketDir in kubelet's device-plugins directory (a listening
// nvidia-*.sock). Either returns a *ConflictError naming the evidence and what to do; a driver
// that gets one must not publish the node's GPUs.
//
//	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
//	if err := deviceplugin.CheckNode(node); err != nil {
//		return err // *ConflictError
//	}
package deviceplugin
