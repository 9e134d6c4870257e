// Package deploy embeds the reference driver's deployment manifests: the DeviceClasses and the
// seed workloads (workloads/*.yaml), so the driver's demo serves exactly the files a platform
// team would kubectl apply.
package deploy

import "embed"

// Files holds deviceclasses.yaml, workloads/*.yaml and mig-parted/*.yaml.
//
//go:embed deviceclasses.yaml workloads/*.yaml mig-parted/*.yaml
var Files embed.FS
