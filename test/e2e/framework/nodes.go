package framework

import (
	"context"
	"fmt"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// NotReadyTaint is the taint the API server puts on a new Node until it reports Ready.
const NotReadyTaint = "node.kubernetes.io/not-ready"

// CreateReadyNode creates a Node as a kubelet registering itself would, reports it Ready with
// room for many pods, and removes the not-ready taint (no node lifecycle controller runs to do
// it). Pods bound to it are never run.
func CreateReadyNode(ctx context.Context, client kubernetes.Interface, name string, labels map[string]string, taints ...corev1.Taint) (*corev1.Node, error) {
	l := map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}
	for k, v := range labels {
		l[k] = v
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}, Spec: corev1.NodeSpec{Taints: taints}}
	node, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create node %s: %w", name, err)
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		Capacity: res, Allocatable: res,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "e2e harness node", LastHeartbeatTime: now, LastTransitionTime: now}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: name}},
	}
	status := node.Status
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status = status
		node, err = client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mark node %s Ready: %w", name, err)
	}
	return removeNotReadyTaint(ctx, client, node)
}

func removeNotReadyTaint(ctx context.Context, client kubernetes.Interface, node *corev1.Node) (*corev1.Node, error) {
	var out *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var keep []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != NotReadyTaint {
				keep = append(keep, t)
			}
		}
		if len(keep) == len(n.Spec.Taints) {
			out = n
			return true, nil
		}
		n.Spec.Taints = keep
		out, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("remove the %s taint of node %s: %w", NotReadyTaint, node.Name, err)
	}
	return out, nil
}

// WaitForServiceAccount waits until ServiceAccount name exists in namespace ns (the
// controller-manager creates each namespace's "default" one; pods cannot be created before).
func WaitForServiceAccount(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("ServiceAccount %s/%s never appeared: %w", ns, name, err)
	}
	return nil
}

// ServiceAccountToken asks the TokenRequest API for a token of ServiceAccount ns/name valid
// for an hour. With a pod, the token is bound to it as kubelet's projected tokens are: it is
// valid only while the pod exists and names the pod's node (the user's extra
// authentication.kubernetes.io/node-name).
func ServiceAccountToken(ctx context.Context, client kubernetes.Interface, ns, name string, pod *corev1.Pod) (string, error) {
	req := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// CreateNamespace creates a namespace with the given annotations and waits for its default
// ServiceAccount.
func CreateNamespace(ctx context.Context, client kubernetes.Interface, name string, annotations map[string]string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return WaitForServiceAccount(ctx, client, name, "default")
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
