// Package deploy embeds the reference driver's deployment manifests: the DeviceClasses and the
// seed workloads (workloads/*.yaml), so the driver's demo serves exactly the files a platform
// team would kubectl apply.
package deploy
