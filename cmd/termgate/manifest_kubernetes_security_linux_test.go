package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/termgate/termgate/sandbox"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// kubePod is the StatefulSet's pod template of a manifest.
func kubePod(t *testing.T, args ...string) corev1.PodTemplateSpec {
	t.Helper()
	out := kubeManifest(t, append([]string{"--image", "registry.example/termgate:1.4"}, args...)...)
	objs, err := kubeDecode(out)
	if err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	for _, o := range objs {
		if sts, ok := o.(*appsv1.StatefulSet); ok {
			return sts.Spec.Template
		}
	}
	t.Fatal("no StatefulSet")
	return corev1.PodTemplateSpec{}
}

// baselineFailures evaluates the pod against the Pod Security Standards'
// baseline level, the latest version, with the admission's own checks,
// and returns the names of the checks it fails.
func baselineFailures(pod corev1.PodTemplateSpec) []string {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		panic(err)
	}
	var failed []string
	for _, r := range eval.EvaluatePod(api.LevelVersion{Level: api.LevelBaseline, Version: api.LatestVersion()}, &pod.ObjectMeta, &pod.Spec) {
		if !r.Allowed {
			failed = append(failed, r.ForbiddenReason+": "+r.ForbiddenDetail)
		}
	}
	slices.Sort(failed)
	return failed
}

// TestManifestKubernetesPodSecurityBaseline: no variant passes the
// baseline level, and each fails exactly these checks: any drift, a
// capability added or a field that baseline forbids, fails the test.
// Baseline allows none of SYS_ADMIN, SYS_PTRACE and NET_ADMIN, with or
// without a user namespace, and serve needs all three.
func TestManifestKubernetesPodSecurityBaseline(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{`non-default capabilities: container "termgate" must not include "NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE" in securityContext.capabilities.add`}},
		{[]string{"--apparmor=false"}, []string{`non-default capabilities: container "termgate" must not include "NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE" in securityContext.capabilities.add`}},
		{[]string{"--user-namespace"}, []string{`non-default capabilities: container "termgate" must not include "NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE" in securityContext.capabilities.add`}},
		{[]string{"--privileged"}, []string{`privileged: container "termgate" must not set securityContext.privileged=true`}},
	} {
		if got := baselineFailures(kubePod(t, c.args...)); !slices.Equal(got, c.want) {
			t.Errorf("%q: baseline fails\n%s\nwant\n%s", c.args, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// TestManifestKubernetesSecurityContext: the default context drops every
// capability and adds back exactly those serve needs, names both
// profiles, and is not privileged; each variant changes only its part.
func TestManifestKubernetesSecurityContext(t *testing.T) {
	t.Parallel()
	// What the launcher refuses to run without, and network policies'.
	var wantCaps []corev1.Capability
	for _, c := range append(sandbox.RootCapabilities(), sandbox.NetworkPolicyCapabilities()...) {
		wantCaps = append(wantCaps, corev1.Capability(c))
	}
	slices.Sort(wantCaps)
	for _, c := range []struct {
		args                      []string
		apparmor, userns, proc, p bool
	}{
		{nil, true, false, false, false},
		{[]string{"--apparmor=false"}, false, false, false, false},
		{[]string{"--user-namespace"}, true, true, false, false},
		{[]string{"--privileged"}, false, false, false, true},
	} {
		pod := kubePod(t, c.args...)
		ctr := pod.Spec.Containers[0]
		sc := ctr.SecurityContext
		if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
			t.Fatalf("%q: security context %+v: want runAsUser 0", c.args, sc)
		}
		if got := sc.Privileged != nil && *sc.Privileged; got != c.p {
			t.Errorf("%q: privileged %v", c.args, got)
		}
		if got := pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers; got != c.userns {
			t.Errorf("%q: user namespace %v", c.args, got)
		}
		if got := sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount; got != c.proc {
			t.Errorf("%q: unmasked /proc %v", c.args, got)
		}
		if got := sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeLocalhost && *sc.AppArmorProfile.LocalhostProfile == "termgate"; got != c.apparmor {
			t.Errorf("%q: AppArmor profile %+v", c.args, sc.AppArmorProfile)
		}
		if c.p {
			if sc.Capabilities != nil || sc.SeccompProfile != nil || len(ctr.Command) != 0 {
				t.Errorf("--privileged: capabilities %+v, seccomp %+v, command %q", sc.Capabilities, sc.SeccompProfile, ctr.Command)
			}
			continue
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(slices.Sorted(slices.Values(sc.Capabilities.Add)), wantCaps) {
			t.Errorf("%q: capabilities %+v, want drop ALL, add %v", c.args, sc.Capabilities, wantCaps)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost || *sc.SeccompProfile.LocalhostProfile != "termgate.json" {
			t.Errorf("%q: seccomp profile %+v", c.args, sc.SeccompProfile)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%q: allowPrivilegeEscalation %v, want false", c.args, sc.AllowPrivilegeEscalation)
		}
		if len(ctr.Command) != 4 || ctr.Command[0] != "/bin/sh" || !strings.HasSuffix(ctr.Command[2], "exec termgate \"$@\"\n") || ctr.Args[0] != "serve" {
			t.Errorf("%q: command %q args %q: want the setup shell, then termgate serve", c.args, ctr.Command, ctr.Args)
		} else if out, err := exec.Command("/bin/sh", "-n", "-c", ctr.Command[2]).CombinedOutput(); err != nil {
			t.Errorf("%q: the setup shell does not parse: %v: %s", c.args, err, out)
		}
	}
}

// TestManifestKubernetesQuota: without --privileged there are no loop
// devices, so the workspace quota is off unless asked for, and asking is
// refused.
func TestManifestKubernetesQuota(t *testing.T) {
	t.Parallel()
	quota := func(args ...string) (string, bool) {
		out := kubeManifest(t, append([]string{"--image", "registry.example/termgate:1.4"}, args...)...)
		objs, err := kubeDecode(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if cm, ok := o.(*corev1.ConfigMap); ok {
				v, ok := cm.Data["TERMGATE_WORKSPACE_QUOTA"]
				return v, ok
			}
		}
		t.Fatal("no ConfigMap")
		return "", false
	}
	if v, ok := quota(); !ok || v != "0" {
		t.Errorf("default: TERMGATE_WORKSPACE_QUOTA %q %v, want 0", v, ok)
	}
	if v, ok := quota("--privileged"); ok {
		t.Errorf("--privileged: TERMGATE_WORKSPACE_QUOTA %q, want serve's default", v)
	}
	if v, ok := quota("--privileged", "--workspace-quota", "5G"); !ok || v != "5G" {
		t.Errorf("--privileged --workspace-quota 5G: %q", v)
	}
	for _, args := range [][]string{{"--workspace-quota", "5G"}, {"--privileged", "--user-namespace"}} {
		code, _, stderr := runCLI(t, "", append([]string{"manifest", "kubernetes", "--image", "r.example/t:1"}, args...)...)
		if code != 2 {
			t.Errorf("%q: status %d (%s), want 2", args, code, stderr)
		}
	}
}

// TestManifestKubernetesUserNamespaceIDs: in a pod's user namespace of
// 65536 ids, the sandbox's and tenants' ids are set within it unless
// given; serve would fail to map the defaults (2000000, 3000000:100000).
func TestManifestKubernetesUserNamespaceIDs(t *testing.T) {
	t.Parallel()
	data := func(args ...string) map[string]string {
		objs, err := kubeDecode(kubeManifest(t, append([]string{"--image", "registry.example/termgate:1.4"}, args...)...))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if cm, ok := o.(*corev1.ConfigMap); ok {
				return cm.Data
			}
		}
		t.Fatal("no ConfigMap")
		return nil
	}
	d := data("--user-namespace")
	if d["TERMGATE_SANDBOX_UID"] != "60000" || d["TERMGATE_SANDBOX_GID"] != "60000" || d["TERMGATE_TENANT_UIDS"] != "10000:50000" {
		t.Errorf("--user-namespace: %v, want the sandbox and tenant ids within 65536", d)
	}
	if d := data("--user-namespace", "--tenant-uids", "20000:100"); d["TERMGATE_TENANT_UIDS"] != "20000:100" {
		t.Errorf("--user-namespace --tenant-uids 20000:100: %v, want the given range", d)
	}
	if d := data(); d["TERMGATE_TENANT_UIDS"] != "" || d["TERMGATE_SANDBOX_UID"] != "" {
		t.Errorf("default: %v, want serve's own ids", d)
	}
}
