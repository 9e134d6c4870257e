// Package controller is the ComputeDomain controller, on sigs.k8s.io/controller-runtime. For
// each ComputeDomain it chooses an NVLink clique with room for the job, makes the objects the
// contract of package computedomain names, keeps the part of the domain's status it owns, and
// removes what it made when the domain is deleted.
//
// # Use
//
// A driver's main registers the controller with its manager:
//
//	scheme := runtime.NewScheme()
//	if err := controller.AddToScheme(scheme); err != nil { ... }
//	byObject, err := controller.CacheByObject("nvidia-dra-driver") // cache only the controller's pods
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Cache: cache.Options{ByObject: byObject}})
//	r, err := controller.New(mgr.GetClient(),
//		controller.WithDriverNamespace("nvidia-dra-driver"),
//		controller.WithDaemonPodTemplate(imexDaemonPod), // image, command, service account, tolerations
//		controller.WithEventRecorder(mgr.GetEventRecorder(controller.Name)),
//		controller.WithUncachedReader(mgr.GetAPIReader()))
//	if err == nil { err = r.SetupWithManager(mgr) }
//	err = mgr.Start(ctx)
//
// Rules lists the RBAC rules the controller needs, each with why, for the driver's ClusterRole.
//
// # Reconcile
//
// For a domain D with UID u, each Reconcile:
//
//  1. adds the finalizer resource.nvidia.com/computedomain-cleanup;
//  2. chooses D's clique once, into status.cliqueID: from the driver's ResourceSlices (the
//     cliqueID attribute of channel devices), the clique with the most free nodes among those
//     with at least max(numNodes, 1), ties to the lower ID. A node is free unless it carries
//     another domain's label; the nodes other domains pinned to a clique still need are not.
//     When none has room, D gets a NoClique event saying each clique's room, and a retry;
//  3. makes, or puts back when edited, the channel ResourceClaimTemplate (when spec.channel is
//     set; in D's namespace, owned by D) and, in the driver's namespace, the daemon
//     ResourceClaimTemplate and DaemonSet computedomain-daemon-<u>. Every field the controller
//     sets is put back; a template's spec (immutable) by deleting and creating it again. An
//     object that lost its label (so the cache no longer holds it) is read from the API server
//     and put back if D controls it or it is named after u; a channel template in the way
//     that is neither labelled nor owned is left alone, with an error;
//  4. labels computedomain.NodeLabel=<u> exactly the nodes whose channel the scheduler
//     allocated to a claim of D (a claim in D's namespace whose ComputeDomainChannelConfig
//     names u), which brings D's IMEX daemon pod to each node of the job as soon as the job's
//     pod is placed there, and takes it away with the claim (labels follow allocations, not
//     prepares, so a channel prepare that waits for the daemon never removes it);
//  5. writes its part of the status: it prunes the nodes whose Node is gone or which run no
//     daemon pod of D, sets each node's index (its position among D's nodes of its clique, by
//     name) and Ready or NotReady (numNodes > 0: that many Ready nodes of D's clique;
//     numNodes 0: at least one node, all Ready). The nodes' IMEX daemons own the rest.
//
// A deleted domain's DaemonSet and templates are deleted (only those that carry its label),
// the label computedomain.NodeLabel=<u> is removed from every node, and then the finalizer.
//
// # Watches
//
// Besides ComputeDomains, the controller watches the DaemonSets, daemon pods and claim
// templates it made (mapped back to their domain by their NodeLabel label), Nodes (their
// labels, and nodes that go), the ResourceClaims of channel templates (node labels) and the
// driver's ResourceSlices (for domains that wait for a clique).
package controller
