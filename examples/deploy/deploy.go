package deploy

import "embed"

// Files holds deviceclasses.yaml, workloads/*.yaml and mig-parted/*.yaml.
//
//go:embed deviceclasses.yaml workloads/*.yaml mig-parted/*.yaml
var Files embed.FS
