// Package selectors compiles and evaluates DRA device selectors (CEL) exactly as the Kubernetes
// API server and scheduler do, and writes them for the gpudra attribute contract.
package selectors
