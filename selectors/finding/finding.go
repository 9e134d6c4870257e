package finding

import (
	"fmt"
	"strings"
)

// Severity says how bad a finding is.
type Severity string

const (
	// SeverityError is a mistake: the object is rejected, or never allocates what it means to.
	SeverityError Severity = "error"
	// SeverityWarning is probably a mistake.
	SeverityWarning Severity = "warning"
	// SeverityInfo is worth knowing (a redundant selector, an applied upgrade).
	SeverityInfo Severity = "info"
)

// Rule names, as they appear in findings.
const (
	// RuleCompile: the expression does not compile (syntax, types, result type, cost, length).
	RuleCompile = "compile"
	// RuleAttributeIsCapacity: a capacity (memory) read as device.attributes[...].
	RuleAttributeIsCapacity = "attribute-is-capacity"
	// RuleCapacityIsAttribute: an attribute read as device.capacity[...].
	RuleCapacityIsAttribute = "capacity-is-attribute"
	// RuleNameAsDomain: device.attributes['memory'] reads the domain "memory", not a name.
	RuleNameAsDomain = "name-as-domain"
	// RuleUnknownAttribute: a name the domain does not publish.
	RuleUnknownAttribute = "unknown-attribute"
	// RuleUnknownCapacity: a capacity the domain does not publish.
	RuleUnknownCapacity = "unknown-capacity"
	// RuleUnknownDomain: a domain no device publishes.
	RuleUnknownDomain = "unknown-domain"
	// RuleWrongDomain: a name published in another domain (pcieRoot in the driver's domain).
	RuleWrongDomain = "wrong-domain"
	// RuleUnknownProfile: a MIG profile that exists on no GPU of the target machine (or of
	// any model, without one), or that is not a profile name.
	RuleUnknownProfile = "unknown-profile"
	// RuleUnknownValue: a value the attribute never has (type 'GPU').
	RuleUnknownValue = "unknown-value"
	// RuleVersionAsString: a version attribute compared with a string or a number.
	RuleVersionAsString = "version-as-string"
	// RuleTypeMismatch: an attribute compared with a literal of another type, or used as the
	// whole condition.
	RuleTypeMismatch = "type-mismatch"
	// RuleQuantityComparison: a capacity compared with a number or string, or with == / !=.
	RuleQuantityComparison = "quantity-comparison"
	// RuleMatchesNothing: the selectors match no device of the target machine.
	RuleMatchesNothing = "matches-nothing"
	// RuleMatchesEverything: the request's selectors match every device its class selects.
	RuleMatchesEverything = "matches-everything"
	// RuleRuntimeError: evaluation fails on a device of the target machine, which makes the
	// scheduler give up on the claim for that node.
	RuleRuntimeError = "runtime-error"
	// RuleWrongClass: a selector reads an attribute the devices of its request's class never
	// publish (profile in the full-GPU class, minor in the MIG class).
	RuleWrongClass = "wrong-class"
	// RuleMissingExactly: a request with neither exactly nor firstAvailable.
	RuleMissingExactly = "missing-exactly"
	// RuleUnqualifiedName: a constraint attribute without a domain that resolves to the
	// driver's domain, where it is not published.
	RuleUnqualifiedName = "unqualified-name"
	// RuleUnknownClass: a DeviceClass that does not exist.
	RuleUnknownClass = "unknown-class"
	// RuleUnknownRequest: a constraint or config naming a request the claim does not have.
	RuleUnknownRequest = "unknown-request"
	// RuleInvalidConfig: the driver's opaque configuration does not decode.
	RuleInvalidConfig = "invalid-config"
	// RuleMissingReference: a pod uses a claim or template the manifest does not define, or a
	// container uses a claim the pod does not declare.
	RuleMissingReference = "missing-reference"
	// RuleUpgrade: what upgrading the manifest to resource.k8s.io/v1 changed or could not.
	RuleUpgrade = "upgrade"
	// RuleDecode: an object that does not decode strictly.
	RuleDecode = "decode"
)

// Finding is one problem found in a manifest or an expression (by lint, the upgrade or check).
type Finding struct {
	// Severity says how bad it is.
	Severity Severity `json:"severity"`
	// Rule names the check that found it: one of the Rule* constants.
	Rule string `json:"rule"`
	// Object is the object the finding is about ("ResourceClaimTemplate default/mig-small"),
	// empty for a bare expression.
	Object string `json:"object,omitempty"`
	// Field is the field path in the object
	// ("spec.spec.devices.requests[0].exactly.selectors[0].cel.expression").
	Field string `json:"field,omitempty"`
	// Line is the 1-based line in the expression the finding points at; 0 when unknown.
	Line int `json:"line,omitempty"`
	// Column is the 1-based column in that line; 0 when unknown.
	Column int `json:"column,omitempty"`
	// Message says what is wrong.
	Message string `json:"message"`
	// Suggestion says what to do instead.
	Suggestion string `json:"suggestion,omitempty"`
	// Fixed is the corrected expression when the fix is mechanical; it always compiles.
	Fixed string `json:"fixed,omitempty"`
}

// String formats a finding on one line.
func (f Finding) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s [%s]", f.Severity, f.Rule)
	if f.Object != "" {
		fmt.Fprintf(&sb, " %s", f.Object)
	}
	if f.Field != "" {
		fmt.Fprintf(&sb, " %s", f.Field)
	}
	if f.Line > 0 {
		fmt.Fprintf(&sb, ":%d:%d", f.Line, f.Column)
	}
	fmt.Fprintf(&sb, ": %s", f.Message)
	if f.Suggestion != "" {
		fmt.Fprintf(&sb, " (fix: %s)", f.Suggestion)
	}
	return sb.String()
}

// HasErrors reports whether any of the findings is an error.
func HasErrors(fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == SeverityError {
			return true
		}
	}
	return false
}

// Rules of what an API server refuses (findings of selectors/check's Checker, severity error).
const (
	// RuleEmpty: the manifest holds no object (kubectl apply: "no objects passed to apply").
	RuleEmpty = "empty"
	// RuleNotServed: the object's apiVersion is not served by the API server (a beta or alpha
	// version a default v1.37 API server disables, or a group it does not have).
	RuleNotServed = "not-served"
	// RuleUnknownKind: the apiVersion is served but has no such kind.
	RuleUnknownKind = "unknown-kind"
	// RuleMissingKind: a document holds data but no kind (kubectl: "Object 'Kind' is missing").
	RuleMissingKind = "missing-kind"
	// RuleInvalidName: metadata.name or metadata.namespace is not a name the API server accepts.
	RuleInvalidName = "invalid-name"
	// RuleInvalidRequest: a request's allocationMode is unknown, or its count negative, or set
	// with allocationMode All.
	RuleInvalidRequest = "invalid-request"
	// RuleInvalidComputeDomain: a ComputeDomain (resource.nvidia.com/v1beta1) that the driver's
	// CRD refuses: an unknown field, a negative spec.numNodes, a template name that is not a DNS
	// subdomain, an allocationMode other than Single or All.
	RuleInvalidComputeDomain = "invalid-compute-domain"
)
