package kubernetes

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// testImage is the image the tests' pods run: busybox plus the host's
// bash, imported into the cluster's containerd (namespace k8s.io, which
// the kubelet uses) under a name with a registry, never pulled.
const testImage = "dsh-sandbox.local/kube-test:1"

func unitPolicy(t *testing.T) sandbox.Policy {
	t.Helper()
	p, ok := policy.Builtin(policy.WorkspaceWrite)
	if !ok {
		t.Fatal("no workspace-write policy")
	}
	p.Backend, p.Image, p.User = Backend, testImage, "1000:1000"
	return p
}

// TestPodShape: the pod runs the stub and nothing of a call; its
// security context, volumes and limits are the policy's.
func TestPodShape(t *testing.T) {
	p := unitPolicy(t)
	ws := t.TempDir()
	tr := filepath.Join(t.TempDir(), "sessions", "s1")
	sess := sandbox.Session{ID: "s1", Cwd: ws, TranscriptDir: tr}
	plan, err := policy.Plan(p, sess, policy.Identity{UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	name := "dsh-sandbox/abc.json"
	sh, err := newPodShape(p, p.Image, plan, 1000, 1000, "/opt/stub", &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}, "")
	if err != nil {
		t.Fatal(err)
	}
	pod := sh.pod("dsh-sandbox-x", "ns", "i-1", sh.deadline(time.Minute, 3*time.Second))
	s := pod.Spec
	if len(s.Containers) != 1 {
		t.Fatalf("%d containers", len(s.Containers))
	}
	c := s.Containers[0]
	if strings.Join(c.Command, " ") != StubTarget+" "+stub.AttachArg || len(c.Args) != 0 || len(c.Env) != 0 || len(c.EnvFrom) != 0 {
		t.Errorf("container runs %q %q with env %v %v, want only the stub in attach mode", c.Command, c.Args, c.Env, c.EnvFrom)
	}
	if !c.Stdin || !c.StdinOnce || c.TTY || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("stdin %v once %v tty %v pull %v", c.Stdin, c.StdinOnce, c.TTY, c.ImagePullPolicy)
	}
	sc := c.SecurityContext
	if *sc.RunAsUser != 1000 || *sc.RunAsGroup != 1000 || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem ||
		*sc.AllowPrivilegeEscalation || *sc.Privileged || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
		sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost {
		t.Errorf("security context %+v", sc)
	}
	if *s.AutomountServiceAccountToken || *s.EnableServiceLinks || s.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("automount %v links %v restart %v", *s.AutomountServiceAccountToken, *s.EnableServiceLinks, s.RestartPolicy)
	}
	if got := *s.ActiveDeadlineSeconds; got != 63+30 {
		t.Errorf("activeDeadlineSeconds = %d, want %d", got, 63+30)
	}
	if m := c.Resources.Limits.Memory().Value(); m != p.Limits.MemoryBytes {
		t.Errorf("memory limit %d, want %d", m, p.Limits.MemoryBytes)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range s.Volumes {
		vols[v.Name] = v
	}
	found := map[string]bool{}
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		switch {
		case m.MountPath == ws:
			found["workspace"] = v.HostPath != nil && v.HostPath.Path == ws && !m.ReadOnly
		case m.MountPath == tr:
			found["transcript"] = v.HostPath != nil && v.HostPath.Path == tr && m.ReadOnly
		case m.MountPath == "/tmp":
			found["tmp"] = v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory
		case m.MountPath == StubTarget:
			found["stub"] = v.HostPath != nil && v.HostPath.Path == "/opt/stub" && m.ReadOnly
		}
	}
	for _, k := range []string{"workspace", "transcript", "tmp", "stub"} {
		if !found[k] {
			t.Errorf("%s mount missing or wrong: %+v / %+v", k, c.VolumeMounts, s.Volumes)
		}
	}
	if pod.Labels[reap.LabelOwner] != reap.LabelOwnerValue || pod.Labels[reap.LabelInstance] != "i-1" {
		t.Errorf("labels %v", pod.Labels)
	}
	// The same shape for the same policy and session: a warm pod fits.
	sh2, _ := newPodShape(p, p.Image, plan, 1000, 1000, "/opt/stub", &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}, "")
	if sh2.key != sh.key {
		t.Error("equal shapes have different keys")
	}
	// Another session's directory is another shape.
	plan3, _ := policy.Plan(p, sandbox.Session{ID: "s2", Cwd: ws, TranscriptDir: tr + "x"}, policy.Identity{UID: 1000, GID: 1000})
	sh3, _ := newPodShape(p, p.Image, plan3, 1000, 1000, "/opt/stub", nil, "")
	if sh3.key == sh.key {
		t.Error("shapes of different sessions share a key")
	}
	// The session id is in no label or annotation (only in the session
	// directory's path, which the pod must mount at that path).
	b, _ := json.Marshal(pod.ObjectMeta)
	if strings.Contains(string(b), `"s1"`) {
		t.Errorf("the pod's metadata names the session: %s", b)
	}
}

// TestPodShapeRoot: uid 0, when the policy names it, runs without
// runAsNonRoot; every other field stays restricted.
func TestPodShapeRoot(t *testing.T) {
	p := unitPolicy(t)
	p.User = "0:0"
	plan, err := policy.Plan(p, sandbox.Session{Cwd: t.TempDir()}, policy.Identity{})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := newPodShape(p, p.Image, plan, 0, 0, "/opt/stub", nil, "runsc")
	if err != nil {
		t.Fatal(err)
	}
	sc := sh.spec.Containers[0].SecurityContext
	if *sc.RunAsNonRoot || *sc.RunAsUser != 0 || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
		t.Errorf("security context %+v", sc)
	}
	if sh.spec.RuntimeClassName == nil || *sh.spec.RuntimeClassName != "runsc" {
		t.Errorf("runtime class %v", sh.spec.RuntimeClassName)
	}
}

// TestKubeletName: an image imported into a node must have a name the
// kubelet finds there: with a registry part, not a Docker Hub short name.
func TestKubeletName(t *testing.T) {
	for name, ok := range map[string]bool{
		"dsh-sandbox.local/dsh-sandbox-bench:latest": true,
		"example.org:5000/a/b:2":                     true,
		"localhost/tools":                            true,
		"dsh-sandbox-bench:latest":                   false,
		"tools":                                      false,
		"someone/tools:3":                            false,
		"Bad Name":                                   false,
	} {
		if err := KubeletName(name); (err == nil) != ok {
			t.Errorf("KubeletName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

// TestNodeDigest: a tag resolves to the digest the nodes' image lists
// show for it, stays a tag when they show none, and is refused when
// nodes disagree.
func TestNodeDigest(t *testing.T) {
	const repo = "reg.example/tools"
	a, b := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	node := func(name string, imgs ...[]string) corev1.Node {
		n := corev1.Node{}
		n.Name = name
		for _, names := range imgs {
			n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: names})
		}
		return n
	}
	for _, tc := range []struct {
		name         string
		nodes        []corev1.Node
		image, error string
	}{
		{"pinned", []corev1.Node{node("n1", []string{repo + ":1", repo + "@" + a}, []string{repo + ":2", repo + "@" + b})}, repo + "@" + a, ""},
		{"agree", []corev1.Node{node("n1", []string{repo + "@" + a, repo + ":1"}), node("n2", []string{repo + ":1", "other.example/x@" + b, repo + "@" + a})}, repo + "@" + a, ""},
		{"imported", []corev1.Node{node("n1", []string{repo + ":1"}, []string{repo + "@" + b})}, repo + ":1", ""},
		{"absent", []corev1.Node{node("n1")}, repo + ":1", ""},
		{"disagree", []corev1.Node{node("n1", []string{repo + ":1", repo + "@" + a}), node("n2", []string{repo + ":1", repo + "@" + b})}, "", a + " on n1; " + b + " on n2"},
	} {
		image, digest, err := nodeDigest("tools", repo+":1", repo, tc.nodes)
		if tc.error != "" {
			if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.error) || !strings.Contains(err.Error(), `"tools"`) {
				t.Errorf("%s: %q, %v; want ErrInvalid naming %q", tc.name, image, err, tc.error)
			}
			continue
		}
		want := ""
		if i := strings.IndexByte(tc.image, '@'); i >= 0 {
			want = tc.image[i+1:]
		}
		if err != nil || image != tc.image || digest != want {
			t.Errorf("%s: %q %q %v, want %q %q", tc.name, image, digest, err, tc.image, want)
		}
	}
}

// TestPodResourcesDefaults: a policy that leaves the memory and CPU
// limits at zero gets the defaults every other backend applies, not a pod
// without limits; a policy's own limits stay as they are.
func TestPodResourcesDefaults(t *testing.T) {
	r := podResources(sandbox.Limits{})
	if m := r.Limits.Memory().Value(); m != policy.DefaultMemoryBytes {
		t.Errorf("memory limit of zero limits = %d, want the default %d", m, policy.DefaultMemoryBytes)
	}
	if c := r.Limits.Cpu().MilliValue(); c != int64(policy.DefaultCPUs*1000) {
		t.Errorf("cpu limit of zero limits = %dm, want the default %vm", c, policy.DefaultCPUs*1000)
	}
	r = podResources(sandbox.Limits{MemoryBytes: 64 << 20, CPUs: 0.5})
	if m := r.Limits.Memory().Value(); m != 64<<20 {
		t.Errorf("memory limit = %d, want %d", m, 64<<20)
	}
	if c := r.Limits.Cpu().MilliValue(); c != 500 {
		t.Errorf("cpu limit = %dm, want 500m", c)
	}
	if req := r.Requests.Memory().Value(); req > 64<<20 {
		t.Errorf("memory request %d above the limit", req)
	}
}
