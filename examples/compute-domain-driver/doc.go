// Command compute-domain-driver is gpudra's reference ComputeDomain (IMEX) driver,
// compute-domain.nvidia.com, assembled from packages computedomain/controller,
// computedomain/nodeplugin and computedomain/imex: one binary with three commands, each a
// thin wiring of flags to one of them.
//
//	compute-domain-driver controller --namespace gpu-dra-driver --daemon-image IMAGE --daemon-service-account SA
//	compute-domain-driver plugin --node-name NODE               # a DaemonSet on GB200 nodes
//	compute-domain-driver daemon                                 # the controller's IMEX daemon pods
//
// The Helm chart (deployments/helm/gpu-dra-driver, computeDomains.enabled) runs all three.
// plugin --nvml=fake --fake-clique CLIQUE serves a fake GB200 tray, as the e2e tier does.
package main
