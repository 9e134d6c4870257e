package deploy

import "embed"

// Files holds deviceclasses.yaml, workloads/*.yaml, mig-parted/*.yaml and the ComputeDomain
// driver's classes and workloads, computedomain/*.yaml.
//
//go:embed deviceclasses.yaml workloads/*.yaml mig-parted/*.yaml computedomain/*.yaml
var Files embed.FS
