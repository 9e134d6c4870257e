package chart

import (
	"fmt"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// slicePolicy is the chart's ResourceSlice ValidatingAdmissionPolicy.
func slicePolicy(t *testing.T) *admissionv1.ValidatingAdmissionPolicy {
	t.Helper()
	for _, o := range render(t, kubeVersion, nil) {
		if o.GetKind() == "ValidatingAdmissionPolicy" {
			p := &admissionv1.ValidatingAdmissionPolicy{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, p); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatal("the chart renders no ValidatingAdmissionPolicy")
	return nil
}

// admit evaluates the policy's match conditions, variables and validations with CEL as the
// API server does for a request (request, object and oldObject as JSON-like maps) and returns
// the first denial's message, "" when admitted.
func admit(t *testing.T, p *admissionv1.ValidatingAdmissionPolicy, request, object, oldObject map[string]any) string {
	t.Helper()
	env, err := cel.NewEnv(cel.OptionalTypes(),
		cel.Variable("request", cel.DynType), cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType), cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{}
	eval := func(expr string) any {
		t.Helper()
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("compile %q: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(map[string]any{"request": request, "object": object, "oldObject": oldObject, "variables": vars})
		if err != nil {
			t.Fatalf("evaluate %q: %v", expr, err)
		}
		return out.Value()
	}
	for _, m := range p.Spec.MatchConditions {
		if eval(m.Expression) != true {
			return ""
		}
	}
	for _, v := range p.Spec.Variables {
		vars[v.Name] = eval(v.Expression)
	}
	for _, v := range p.Spec.Validations {
		if eval(v.Expression) != true {
			if v.MessageExpression != "" {
				return fmt.Sprint(eval(v.MessageExpression))
			}
			return v.Message
		}
	}
	return ""
}

// TestSlicePolicyPinsDriverAndNode: the plugin's token may create, update and delete only
// ResourceSlices of its own node and of the chart's driver (spec.driver); other drivers' slices
// on its own node are denied too.
func TestSlicePolicyPinsDriverAndNode(t *testing.T) {
	p := slicePolicy(t)
	const sa = "system:serviceaccount:gpu-dra-driver:gpu-dra-driver"
	request := func(op, user string) map[string]any {
		return map[string]any{"operation": op, "userInfo": map[string]any{"username": user,
			"extra": map[string]any{"authentication.kubernetes.io/node-name": []any{"node-a"}}}}
	}
	slice := func(driver, node string) map[string]any {
		return map[string]any{"spec": map[string]any{"driver": driver, "nodeName": node, "pool": map[string]any{"name": node}}}
	}
	for _, tc := range []struct {
		name         string
		op, user     string
		driver, node string
		allowed      bool
	}{
		{"own-create", "CREATE", sa, driverName, "node-a", true},
		{"own-update", "UPDATE", sa, driverName, "node-a", true},
		{"own-delete", "DELETE", sa, driverName, "node-a", true},
		{"other-node", "CREATE", sa, driverName, "node-b", false},
		{"other-driver-create", "CREATE", sa, "compute-domain.nvidia.com", "node-a", false},
		{"other-driver-update", "UPDATE", sa, "gpu.example.com", "node-a", false},
		{"other-driver-delete", "DELETE", sa, "gpu.example.com", "node-a", false},
		{"not-the-plugin", "CREATE", "system:serviceaccount:other:other", "gpu.example.com", "node-b", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obj, old map[string]any
			s := slice(tc.driver, tc.node)
			switch tc.op {
			case "CREATE":
				obj = s
			case "UPDATE":
				obj, old = s, s
			case "DELETE":
				old = s
			}
			msg := admit(t, p, request(tc.op, tc.user), obj, old)
			switch {
			case tc.allowed && msg != "":
				t.Errorf("denied: %s", msg)
			case !tc.allowed && msg == "":
				t.Errorf("%s of a slice of driver %s on node %s by %s admitted; want denied", tc.op, tc.driver, tc.node, tc.user)
			case !tc.allowed:
				t.Logf("denied as it should: %s", msg)
			}
		})
	}
}
