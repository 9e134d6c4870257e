// Package claimstate compares a claim's checkpoint entry with its allocation and rebuilds the
// answer to kubelet from the entry, for both kubelet plugins (packages draplugin and
// draplugin/exclusive): ClaimRef and Ref name a claim in logs and reports, SameAllocation
// checks an entry against the allocation results, CompleteRecovered completes an entry adopted
// from a CDI spec, ShareIDs and Result build the prepared devices.
package claimstate
