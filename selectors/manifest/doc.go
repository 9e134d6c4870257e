// Package manifest reads the Kubernetes manifests the selectors packages check: multi-document
// YAML with ResourceClaims, ResourceClaimTemplates and DeviceClasses of resource.k8s.io/v1, and
// the Pods, Deployments and Jobs that use them.
//
// # Decoding
//
// Decode returns every object with its position in the stream; the kinds above are decoded
// strictly (an unknown field is an error, as the API server's strict field validation makes it),
// other kinds are kept with a nil Object. Objects that do not decode are *DecodeError values in
// the joined error, and the others are still returned.
//
//	objs, err := manifest.Decode(data)
//	var de *manifest.DecodeError
//	if errors.As(err, &de) {
//		fmt.Println(de.Object, de.Err) // the first object that does not decode
//	}
//	for _, o := range objs {
//		if spec, path := manifest.ClaimSpec(o.Object); spec != nil {
//			fmt.Println(o, path, len(spec.Devices.Requests)) // ResourceClaimTemplate ml/x spec.spec 1
//		}
//	}
//
// # Lower-level readers
//
// SplitDocuments, Meta and DecodeObject are the steps of Decode for callers that walk documents
// themselves (the upgrade keeps documents it does not change byte for byte); PodSpec and
// ClaimSpec reach the pod spec of a workload and the claim spec of a claim or template.
package manifest
