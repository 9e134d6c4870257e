// Package reconcile runs a kubelet plugin's reconciliation at start: Reconcile runs the
// plugin's steps under its locks after removing the temporary files of interrupted spec writes;
// ReconcileSpecs (lost specs rewritten, orphans removed) and AdoptOrphans (claims rebuilt from
// their specs when the checkpoint was lost) are the steps both plugins share.
package reconcile
