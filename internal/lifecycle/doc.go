// Package lifecycle is a kubelet plugin's life after Start: Fatal is its HandleError
// (recoverable errors of the kubelet-plugin helper logged, the first fatal one kept and
// signalled through Done), InFlight lets Stop wait for the operations under way.
package lifecycle
