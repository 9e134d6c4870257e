package gpudra

import "github.com/gpudra/gpudra/resourcepool"

// ValidateDriverName checks a DRA driver name the way the API server checks a ResourceSlice's
// spec.driver, and the attribute domain the driver name also is: a lowercase DNS subdomain of at
// most 63 characters (e.g. gpu.nvidia.com). It is resourcepool.ValidateDriverName.
func ValidateDriverName(name string) error { return resourcepool.ValidateDriverName(name) }

// ValidatePoolName checks a pool name the way the API server checks a ResourceSlice's
// spec.pool.name: at most 253 characters, one or more DNS subdomains separated by "/". A node's
// pool is usually named after the node. It is resourcepool.ValidatePoolName.
func ValidatePoolName(name string) error { return resourcepool.ValidatePoolName(name) }

// ValidateNodeName checks a node name the way the API server checks a Node's name and a
// ResourceSlice's spec.nodeName: a DNS subdomain (lowercase letters, digits, "-" and ".", at most
// 253 characters). It is resourcepool.ValidateNodeName.
func ValidateNodeName(name string) error { return resourcepool.ValidateNodeName(name) }
