package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// kubeDecode decodes every document of a YAML stream strictly into the
// Kubernetes API types: an unknown field, a field in the wrong case or a
// key given twice is an error (apimachinery's strict codec, over
// sigs.k8s.io/json), as a typo is.
func kubeDecode(manifest string) ([]runtime.Object, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	dec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	var objs []runtime.Object
	for range 32 { // bounded: the manifest has six documents
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if onlyComments(doc) {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
	return nil, errors.New("more than 32 documents")
}

// onlyComments reports whether a YAML document holds no data.
func onlyComments(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && !bytes.Equal(line, []byte("---")) {
			return false
		}
	}
	return true
}

func kubeManifest(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, "", append([]string{"manifest", "kubernetes"}, args...)...)
	if code != 0 {
		t.Fatalf("termgate manifest kubernetes %q: status %d: %s", args, code, stderr)
	}
	return stdout
}

// TestManifestKubernetesDecodesStrictly: every document is a valid object
// of its kind, and the parts that make the pods one cluster fit together.
func TestManifestKubernetesDecodesStrictly(t *testing.T) {
	out := kubeManifest(t, "--image", "registry.example/termgate:1.4", "--namespace", "tg", "--replicas", "4",
		"--memory", "2G", "--command", "/bin/sh", "--command", "/bin/bash", "--max-running", "40")
	objs, err := kubeDecode(out)
	if err != nil {
		t.Fatalf("strict decode: %v\n%s", err, out)
	}
	var kinds []string
	var cm *corev1.ConfigMap
	var headless, client *corev1.Service
	var sts *appsv1.StatefulSet
	var pdb *policyv1.PodDisruptionBudget
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			cm, kinds = o, append(kinds, "ConfigMap")
		case *corev1.Service:
			if o.Spec.ClusterIP == corev1.ClusterIPNone {
				headless = o
			} else {
				client = o
			}
			kinds = append(kinds, "Service")
		case *appsv1.StatefulSet:
			sts, kinds = o, append(kinds, "StatefulSet")
		case *policyv1.PodDisruptionBudget:
			pdb, kinds = o, append(kinds, "PodDisruptionBudget")
		default:
			t.Errorf("unexpected object %T", o)
		}
	}
	if !slices.Equal(kinds, []string{"ConfigMap", "Service", "Service", "StatefulSet", "PodDisruptionBudget"}) || headless == nil || client == nil {
		t.Fatalf("kinds %q", kinds)
	}
	for _, o := range []interface{ GetNamespace() string }{cm, headless, client, sts, pdb} {
		if o.GetNamespace() != "tg" {
			t.Errorf("%T in namespace %q", o, o.GetNamespace())
		}
	}
	pod := sts.Spec.Template
	podLabels := labels.Set(pod.Labels)
	for name, sel := range map[string]map[string]string{"headless": headless.Spec.Selector, "client": client.Spec.Selector} {
		if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(podLabels) {
			t.Errorf("%s Service selector %v does not match the pods' labels %v", name, sel, pod.Labels)
		}
	}
	for name, sel := range map[string]map[string]string{"StatefulSet": sts.Spec.Selector.MatchLabels, "PodDisruptionBudget": pdb.Spec.Selector.MatchLabels} {
		if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(podLabels) {
			t.Errorf("%s selector %v does not match the pods' labels %v", name, sel, pod.Labels)
		}
	}
	if !headless.Spec.PublishNotReadyAddresses || len(headless.Spec.Ports) != 1 || headless.Spec.Ports[0].Name != "http" || headless.Name != "termgate-headless" {
		t.Errorf("headless Service %+v: want publishNotReadyAddresses and one port named http (the SRV records')", headless.Spec)
	}
	if sts.Spec.ServiceName != headless.Name || sts.Spec.Replicas == nil || *sts.Spec.Replicas != 4 || sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("StatefulSet spec: serviceName %q replicas %v policy %q", sts.Spec.ServiceName, sts.Spec.Replicas, sts.Spec.PodManagementPolicy)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v", pdb.Spec.MaxUnavailable)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken || pod.Spec.HostPID || pod.Spec.HostNetwork {
		t.Errorf("pod spec: automount %v hostPID %v hostNetwork %v", pod.Spec.AutomountServiceAccountToken, pod.Spec.HostPID, pod.Spec.HostNetwork)
	}
	c := pod.Spec.Containers[0]
	var node *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "TERMGATE_NODE" {
			node = &c.Env[i]
		}
	}
	if node == nil || node.ValueFrom == nil || node.ValueFrom.FieldRef == nil || node.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("TERMGATE_NODE %+v: want the pod's name by fieldRef", node)
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != cm.Name {
		t.Errorf("envFrom %+v: want the ConfigMap %s", c.EnvFrom, cm.Name)
	}
	secrets := 0
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			secrets++
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400 {
				t.Errorf("secret volume %s: mode %v, want 0400", v.Name, v.Secret.DefaultMode)
			}
		}
		if v.Name == "state" && (v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit.String() != "1Gi") {
			t.Errorf("state volume %+v: want a 1Gi emptyDir in memory", v)
		}
	}
	if secrets != 2 {
		t.Errorf("%d secret volumes, want the JWT's and the node's", secrets)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes %+v %+v", c.ReadinessProbe, c.LivenessProbe)
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged != nil || sc.Capabilities == nil || sc.SeccompProfile == nil {
		t.Errorf("security context %+v: want capabilities and a seccomp profile, not privileged", c.SecurityContext)
	}
	if want := map[string]string{
		"TERMGATE_PEER_DNS": "termgate-headless.tg.svc.cluster.local", "TERMGATE_PEER_PORT": "8080", "TERMGATE_SIGTERM": "shutdown",
		"TERMGATE_MAX_CONNS_PER_ADDR": "4096", "TERMGATE_WORKSPACE_QUOTA": "0", "TERMGATE_MEMORY": "2G", "TERMGATE_COMMAND": "/bin/sh,/bin/bash", "TERMGATE_MAX_RUNNING": "40",
	}; !mapsEqual(cm.Data, want) {
		t.Errorf("ConfigMap data %v, want %v", cm.Data, want)
	}

	// What the pod runs is what serve accepts: the container's args over
	// the ConfigMap's environment and the pod's name.
	for k, v := range cm.Data {
		t.Setenv(k, v)
	}
	t.Setenv("TERMGATE_NODE", "termgate-3")
	o, err := parseServe(c.Args[1:], io.Discard)
	if err != nil {
		t.Fatalf("serve %q refuses the pod's configuration: %v", c.Args, err)
	}
	if c.Args[0] != "serve" || o.cluster.node != "termgate-3" || o.cluster.peerDNS != "termgate-headless.tg.svc.cluster.local" ||
		o.sigterm != "shutdown" || o.listener.MaxConnsPerAddr != 4096 || o.session.MaxRunning != 40 {
		t.Errorf("serve in the pod: node %q peers %q sigterm %q conns per addr %d", o.cluster.node, o.cluster.peerDNS, o.sigterm, o.listener.MaxConnsPerAddr)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestManifestKubernetesStrictDecodeRefusesTypos: the check above can
// fail: a copy with a misspelt field, a field in the wrong case or a key
// given twice is refused.
func TestManifestKubernetesStrictDecodeRefusesTypos(t *testing.T) {
	out := kubeManifest(t, "--image", "registry.example/termgate:1.4")
	if _, err := kubeDecode(out); err != nil {
		t.Fatalf("the manifest itself: %v", err)
	}
	for _, m := range []struct{ name, from, to string }{
		{"misspelt field", "  replicas: 3\n", "  replica: 3\n"},
		{"wrong case", "  serviceName: ", "  servicename: "},
		{"duplicated key", "  podManagementPolicy: Parallel\n", "  podManagementPolicy: Parallel\n  podManagementPolicy: OrderedReady\n"},
		{"bad quantity", "sizeLimit: 1Gi", "sizeLimit: 1Gigabyte"},
	} {
		if strings.Count(out, m.from) != 1 {
			t.Fatalf("%s: %q is not in the manifest once", m.name, m.from)
		}
		if _, err := kubeDecode(strings.Replace(out, m.from, m.to, 1)); err == nil {
			t.Errorf("%s: the mutated copy decodes", m.name)
		}
	}
}

// TestManifestKubernetesRefusesBadFlags: each bad value is a usage error
// naming its flag, and the flags the manifest sets itself are refused.
func TestManifestKubernetesRefusesBadFlags(t *testing.T) {
	t.Parallel()
	img := []string{"--image", "registry.example/termgate:1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--image"},
		{[]string{"--image", "bad image"}, "--image"},
		{append([]string{"--name", "Termgate"}, img...), "--name"},
		{append([]string{"--name", strings.Repeat("t", 53)}, img...), "--name"},
		{append([]string{"--namespace", "a_b"}, img...), "--namespace"},
		{append([]string{"--replicas", "0"}, img...), "--replicas"},
		{append([]string{"--state-size", "1GB"}, img...), "--state-size"},
		{append([]string{"--cluster-domain", "cluster.local."}, img...), "--cluster-domain"},
		{append(img, "--listen", ":9000"), "--listen"},
		{append(img, "--peer", "x=http://x:1"), "--peer"},
		{append(img, "--node-secret-file", "/x"), "--node-secret-file"},
		{append(img, "--memory", "lots"), "memory"},
		{append(img, "--origin", "https://a.example,https://b.example"), "comma"},
		{append(img, "stray"), "stray"},
	} {
		code, _, stderr := runCLI(t, "", append([]string{"manifest", "kubernetes"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("manifest kubernetes %q: status %d, stderr %q; want 2 naming %q", c.args, code, stderr, c.want)
		}
	}
}
