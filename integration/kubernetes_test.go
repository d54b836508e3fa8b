//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/kubernetes"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/oci"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// kubeImage is the test image in the test cluster's containerd (namespace
// k8s.io, the kubelet's), named with a registry part so that the kubelet
// looks it up under the same name; pods never pull it.
const kubeImage = "dsh-sandbox.local/itest-busybox:1"

// kubeTest is the test cluster of scripts/kube.sh, as its start prints
// it.
type kubeTest struct {
	// env points the CLI at the cluster.
	env                            []string
	containerd, namespace, seccomp string
	cfg                            *rest.Config
	cli                            k8s.Interface
}

// requireKube skips unless the cluster of scripts/kube.sh is up (its
// environment set, running as root); in CI it fails instead
// (scripts/test.sh starts it).
func requireKube(t testing.TB) kubeTest {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name+" unset")
		}
		return v
	}
	kc := get("DSH_SANDBOX_TEST_KUBECONFIG")
	k := kubeTest{
		containerd: get("DSH_SANDBOX_TEST_KUBE_CONTAINERD"),
		namespace:  get("DSH_SANDBOX_TEST_KUBE_NAMESPACE"),
		seccomp:    get("DSH_SANDBOX_TEST_KUBE_SECCOMP_DIR"),
	}
	if len(missing) == 0 {
		var err error
		k.cfg, err = clientcmd.BuildConfigFromFlags("", kc)
		if err == nil {
			k.cli, err = k8s.NewForConfig(k.cfg)
		}
		if err != nil {
			missing = append(missing, "a usable DSH_SANDBOX_TEST_KUBECONFIG ("+err.Error()+")")
		}
	}
	if len(missing) > 0 {
		msg := "needs the test cluster of scripts/kube.sh (eval \"$(scripts/kube.sh start)\"): " + strings.Join(missing, ", ")
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	k.env = []string{"KUBECONFIG=" + kc, "DSH_SANDBOX_KUBE_NAMESPACE=" + k.namespace, "DSH_SANDBOX_KUBE_SECCOMP_DIR=" + k.seccomp}
	return k
}

var (
	kubeImportOnce sync.Once
	kubeImportErr  string
)

// importKube imports the test image into the cluster's containerd through
// the CLI's containerd backend, once per test binary.
func importKube(t testing.TB, k kubeTest) {
	t.Helper()
	kubeImportOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dsh-sandbox-kube-import-")
		if err != nil {
			kubeImportErr = err.Error()
			return
		}
		defer os.RemoveAll(dir)
		var base bytes.Buffer
		if err := images.BusyboxRootfsTar(&base, images.DefaultBusyboxPath); err != nil {
			kubeImportErr = "busybox rootfs (scripts/setup.sh installs busybox-static): " + err.Error()
			return
		}
		file := filepath.Join(dir, "busybox-bash.tar")
		f, err := os.Create(file)
		if err == nil {
			err = images.AddHostBinaries(f, &base, "bash")
			f.Close()
		}
		if err != nil {
			kubeImportErr = "test image: " + err.Error()
			return
		}
		out, err := exec.Command(binary, "images", "import", "--data-dir", filepath.Join(dir, "data"), "--state-dir", filepath.Join(dir, "state"),
			"--backend", "containerd", "--containerd-address", k.containerd, "--containerd-namespace", "k8s.io", "--name", kubeImage, file).CombinedOutput()
		if err != nil {
			kubeImportErr = fmt.Sprintf("%v: %s", err, out)
		}
	})
	if kubeImportErr != "" {
		t.Fatalf("images import into the cluster's containerd: %s", kubeImportErr)
	}
}

// pods lists the pods dsh-sandbox made in the test namespace.
func (k kubeTest) pods(t testing.TB) []string {
	t.Helper()
	return k.podsMatching(t, reap.LabelOwner+"="+reap.LabelOwnerValue)
}

// podsMatching lists the pods of the test namespace that selector
// selects, each with its phase.
func (k kubeTest) podsMatching(t testing.TB, selector string) []string {
	t.Helper()
	l, err := k.cli.CoreV1().Pods(k.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	var names []string
	for _, p := range l.Items {
		names = append(names, p.Name+" ("+string(p.Status.Phase)+")")
	}
	return names
}

// waitPods waits (60 s at most) until ok accepts the pods dsh-sandbox
// made in the namespace, and returns them.
func (k kubeTest) waitPods(t *testing.T, what string, ok func([]string) bool) []string {
	t.Helper()
	return k.waitPodsMatching(t, what, reap.LabelOwner+"="+reap.LabelOwnerValue, ok)
}

// waitPodsMatching waits (60 s at most) until ok accepts the pods of the
// namespace that selector selects, and returns them.
func (k kubeTest) waitPodsMatching(t *testing.T, what, selector string, ok func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		pods := k.podsMatching(t, selector)
		if ok(pods) {
			return pods
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s, %s: pods %v", what, pods)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKubernetesMatchesOCI runs the same call of the same session on the
// oci backend and on the kubernetes backend, through the CLI, and
// compares what the command sees: the environment (DSH_* included) is
// identical; the transcript is readable and read-only on both; another
// session's directory is visible on neither; the workspace is writable.
func TestKubernetesMatchesOCI(t *testing.T) {
	k := requireKube(t)
	e := newEnv(t)
	importKube(t, k)
	file := testImageTar(t)
	if r := run(t, nil, append(append([]string{"images", "import"}, e.flags("")...), "--backend", "oci", "--name", kubeImage, file)...); r.code != 0 {
		t.Fatalf("images import --backend oci exited %d: %s", r.code, r.stderr)
	}
	path, before := seedTranscript(t, e, "s1")
	other, _ := seedTranscript(t, e, "other-session")
	// A workspace and transcript of an ordinary user: policy user auto
	// runs the call as that user on both backends (the kubernetes
	// backend refuses auto resolving to root).
	chownTrees(t, agentUID, e.workspace, e.root)
	command := `env | sort; echo ---; id -u; echo ---; cat "$DSH_SESSION_JSONL"; ` +
		`echo x >> "$DSH_SESSION_JSONL" 2>/dev/null && echo transcript-WRITABLE; ` +
		`ls -d '` + filepath.Dir(other) + `' 2>/dev/null && echo OTHER-SESSION-VISIBLE; ` +
		`touch ./written-by-call`
	outs := map[string][]string{}
	for _, b := range []string{"oci", "kubernetes"} {
		args := append([]string{"exec"}, e.flags("s1")...)
		r := run(t, k.env, append(args, "--backend", b, "--image", kubeImage, "--", command)...)
		if r.code != 0 {
			t.Fatalf("exec --backend %s exited %d: %s", b, r.code, r.stderr)
		}
		s := sections(r.stdout)
		if len(s) != 3 {
			t.Fatalf("exec --backend %s printed %q: want 3 sections", b, r.stdout)
		}
		if got := strings.TrimSpace(s[1]); got != "4321" {
			t.Errorf("--backend %s ran as uid %q, want 4321 (the workspace's owner)", b, got)
		}
		if strings.Contains(s[2], "WRITABLE") || !strings.HasPrefix(s[2], string(before)) {
			t.Errorf("--backend %s: transcript inside = %q, want the header line, read-only", b, s[2])
		}
		if strings.Contains(s[2], "OTHER-SESSION-VISIBLE") {
			t.Errorf("--backend %s: another session's directory is visible: %q", b, s[2])
		}
		if _, err := os.Stat(filepath.Join(e.workspace, "written-by-call")); err != nil {
			t.Errorf("--backend %s: the workspace is not writable: %v", b, err)
		}
		os.Remove(filepath.Join(e.workspace, "written-by-call"))
		outs[b] = s
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("transcript changed to %q", after)
	}
	if outs["kubernetes"][0] != outs["oci"][0] {
		t.Errorf("env on kubernetes =\n%s\nwant the oci backend's\n%s", outs["kubernetes"][0], outs["oci"][0])
	}
	var dsh []string
	for _, l := range strings.Split(outs["oci"][0], "\n") {
		if strings.HasPrefix(l, "DSH_") {
			dsh = append(dsh, l)
		}
	}
	if !strings.Contains(outs["oci"][0], "DSH_SESSION_ID=s1\n") || len(dsh) < 4 {
		t.Errorf("the oci backend's env has DSH_* %q, want the session's snapshot (DSH_SESSION_ID=s1 among ≥ 4)", dsh)
	}
	if strings.Contains(outs["kubernetes"][0], "KUBERNETES_") {
		t.Errorf("the kubelet's variables reached the call: %s", outs["kubernetes"][0])
	}
}

// TestKubernetesServeKillReap: serve with warm pods is killed with
// SIGKILL amid two calls; its pods stay (warm ones wait for a call that
// never comes); `reap` deletes every one of them; a restarted serve runs
// a call and, stopped, leaves no pod.
func TestKubernetesServeKillReap(t *testing.T) {
	k := requireKube(t)
	e := newEnv(t)
	importKube(t, k)
	if left := k.pods(t); len(left) != 0 {
		t.Fatalf("pods of dsh-sandbox before the test: %v", left)
	}
	policies := t.TempDir()
	doc := "name: kube\nbackend: kubernetes\nimage: " + kubeImage + "\nuser: \"1000:1000\"\n"
	if err := os.WriteFile(filepath.Join(policies, "kube.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(e.home, "run", "sandbox.sock")
	sv := startServeEnv(t, e, sock, append(k.env, "DSH_SANDBOX_KUBE_WARM=2"), "--policy-dir", policies)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	if err := os.Chown(e.workspace, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		wg.Go(func() {
			_, _ = sv.cl.Run(ctx, types.RunRequest{Policy: "kube", Cwd: e.workspace, Command: fmt.Sprintf("touch started-%d; sleep 600", i)})
		})
	}
	// Both calls run their command, and the pool refilled behind them:
	// four pods, all running.
	deadline := time.Now().Add(90 * time.Second)
	for {
		started, _ := filepath.Glob(filepath.Join(e.workspace, "started-*"))
		pods := k.pods(t)
		if len(started) == 2 && len(pods) == 4 && !slices.ContainsFunc(pods, func(p string) bool { return !strings.HasSuffix(p, "(Running)") }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90 s, calls started %v, pods %v: want 2 calls and 4 running pods; %s", started, pods, sv.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sv.cmd.Process.Kill()
	<-sv.done
	wg.Wait()
	left := k.pods(t)
	t.Logf("after kill -9 of serve: %d pods: %v", len(left), left)
	if len(left) < 2 {
		t.Fatalf("after kill -9, pods %v: want at least the 2 warm pods, which only reap removes", left)
	}
	r := run(t, k.env, append(append([]string{"reap"}, e.flags("")...), "--backend", "kubernetes", "--json")...)
	var reaped []struct {
		Backend string `json:"backend"`
		Removed int    `json:"removed"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &reaped); r.code != 0 || err != nil || len(reaped) != 1 || reaped[0].Removed < len(left) {
		t.Fatalf("reap --backend kubernetes --json = %d, %q (%v; stderr %q); want %d pods removed", r.code, r.stdout, err, r.stderr, len(left))
	}
	k.waitPods(t, "pods left after reap", func(p []string) bool { return len(p) == 0 })

	sv2 := startServeEnv(t, e, sock, k.env, "--policy-dir", policies)
	res, err := sv2.cl.Run(context.Background(), types.RunRequest{Policy: "kube", Cwd: e.workspace, Command: "echo after-restart; id -u"})
	if err != nil || res.Result.ExitCode == nil || *res.Result.ExitCode != 0 || res.Result.Stdout.Text != "after-restart\n1000\n" {
		t.Fatalf("a call after the restart = %+v, %v; %s", res, err, sv2.stderr)
	}
	sv2.stop(t)
	k.waitPods(t, "pods left after serve stopped", func(p []string) bool { return len(p) == 0 })
}

// BenchmarkKubernetesCall times one call of true per iteration on the oci
// backend (runc, a fresh container, the built-in workspace-write policy),
// on a pod created for the call (cold) and on a warm pod, interleaved so
// that machine load affects all three alike; the warm pool refills
// between iterations, untimed. It reports the median and p95 of each, and
// then, from the API server's own apiserver_request_total, the requests
// and writes (POST, PUT, PATCH, DELETE) the cluster served per call over
// 20 more calls of each kind: everyone's requests, the kubelet's status
// updates and events and the scheduler's binding included, since each is
// a cost of the call. Run it with -bench KubernetesCall -benchtime 100x.
func BenchmarkKubernetesCall(b *testing.B) {
	k := requireKube(b)
	importKube(b, k)
	base := b.TempDir()
	for _, d := range []string{filepath.Dir(base), base} { // searchable for the oci backend's mapped root
		if err := os.Chmod(d, 0o711); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	oex, err := oci.New(oci.Options{Service: driver.Service{StateDir: filepath.Join(base, "oci")}})
	if err != nil {
		b.Fatal(err)
	}
	defer oex.Close()
	stubPath := filepath.Join(filepath.Dir(binary), "dsh-sandbox-stub")
	open := func(name string, warm int) *kubernetes.Executor {
		ex, err := kubernetes.New(ctx, kubernetes.Options{Config: k.cfg, Namespace: k.namespace, Service: driver.Service{StateDir: filepath.Join(base, name)},
			Stub: stubPath, SeccompDir: k.seccomp, Warm: warm})
		if err != nil {
			b.Fatal(err)
		}
		return ex
	}
	cold, warm := open("cold", 0), open("warm", 1)
	defer cold.Close()
	defer warm.Close()
	op, _ := policy.Builtin(policy.WorkspaceWrite)
	kp := op
	kp.Backend, kp.Image, kp.User = kubernetes.Backend, kubeImage, "0:0"
	call := func(ex sandbox.Executor, p sandbox.Policy) time.Duration {
		start := time.Now()
		res, err := ex.Run(ctx, &sandbox.Request{Command: "true", Policy: p, Session: sandbox.Session{Cwd: base}})
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("Run(true) on %s = %+v, %v", p.Backend, res, err)
		}
		return time.Since(start)
	}
	// pinned is warm with its pods on the node itself, not through the
	// scheduler (DSH_SANDBOX_KUBE_NODE), for the request counts.
	nodes, err := k.cli.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		b.Fatalf("list nodes: %v", err)
	}
	pinned, err := kubernetes.New(ctx, kubernetes.Options{Config: k.cfg, Namespace: k.namespace, Service: driver.Service{StateDir: filepath.Join(base, "pinned")},
		Stub: stubPath, SeccompDir: k.seccomp, Warm: 1, Node: nodes.Items[0].Name})
	if err != nil {
		b.Fatal(err)
	}
	defer pinned.Close()
	// waitWarm waits until ex's pool is full again: its one pod runs, is
	// attached and has answered, and no call holds it.
	waitWarm := func(ex *kubernetes.Executor) {
		deadline := time.Now().Add(60 * time.Second)
		for ex.WarmPods() < 1 {
			if time.Now().After(deadline) {
				b.Fatal("the warm pool did not refill within 60 s")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	call(oex, op)
	call(cold, kp)
	call(warm, kp) // makes the pool of the shape
	call(pinned, kp)
	var so, sc, sw []time.Duration
	for b.Loop() {
		so = append(so, call(oex, op))
		sc = append(sc, call(cold, kp))
		b.StopTimer()
		waitWarm(warm)
		b.StartTimer()
		sw = append(sw, call(warm, kp))
	}
	b.StopTimer()
	for _, s := range []struct {
		name string
		d    []time.Duration
	}{{"oci", so}, {"cold", sc}, {"warm", sw}} {
		slices.Sort(s.d)
		b.ReportMetric(ms(s.d[len(s.d)/2]), s.name+"-p50-ms")
		b.ReportMetric(ms(s.d[(len(s.d)*95+99)/100-1]), s.name+"-p95-ms")
	}
	const n = 20
	for _, s := range []struct {
		name string
		ex   *kubernetes.Executor
	}{{"cold", cold}, {"warm", warm}, {"warm-pinned", pinned}} {
		if s.ex != cold {
			// A call first: a pool whose pod no call took for 5 minutes
			// (WarmTTL) is empty and refills on the next call.
			call(s.ex, kp)
			waitWarm(s.ex)
		}
		before := apiRequests(b, k)
		for range n {
			call(s.ex, kp)
			if s.ex != cold {
				waitWarm(s.ex) // the refill is part of a warm call's cost
			}
		}
		// The kubelet's last status updates trail the call: wait until
		// the calls' pods are gone (a warm executor keeps its one).
		keep := 1
		if s.ex == cold {
			keep = 0
		}
		deadline := time.Now().Add(30 * time.Second)
		for p, _ := s.ex.Pods(ctx); len(p) > keep && time.Now().Before(deadline); p, _ = s.ex.Pods(ctx) {
			time.Sleep(50 * time.Millisecond)
		}
		after := apiRequests(b, k)
		b.ReportMetric((after.total-before.total)/n, s.name+"-apireq/call")
		b.ReportMetric((after.writes-before.writes)/n, s.name+"-apiwrites/call")
		var by []string
		for key, v := range after.byKind {
			if d := v - before.byKind[key]; d > 0 {
				by = append(by, fmt.Sprintf("%s %.2f", key, d/n))
			}
		}
		slices.Sort(by)
		b.Logf("%s: API server requests per call by verb and resource: %s", s.name, strings.Join(by, "; "))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// apiCounts are sums of the API server's apiserver_request_total.
type apiCounts struct {
	total, writes float64
	// byKind is per "VERB resource/subresource".
	byKind map[string]float64
}

// apiRequests reads the API server's request counters.
func apiRequests(b *testing.B, k kubeTest) apiCounts {
	b.Helper()
	raw, err := k.cli.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("API server metrics: %v", err)
	}
	c := apiCounts{byKind: map[string]float64{}}
	label := func(line, name string) string {
		_, v, ok := strings.Cut(line, name+`="`)
		if !ok {
			return ""
		}
		v, _, _ = strings.Cut(v, `"`)
		return v
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			continue
		}
		verb := label(line, "verb")
		c.total += v
		switch verb {
		case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY", "CREATE", "UPDATE":
			c.writes += v
		}
		res := label(line, "resource")
		if sub := label(line, "subresource"); sub != "" {
			res += "/" + sub
		}
		c.byKind[verb+" "+res] += v
	}
	return c
}

// TestKubernetesRBAC applies contrib/kubernetes/rbac.yaml to the test
// cluster and acts as its service account: doctor finds every permission
// and a call runs. A service account without the binding is the
// refusal: doctor names the missing permissions and a call fails with
// exit 125.
func TestKubernetesRBAC(t *testing.T) {
	k := requireKube(t)
	e := newEnv(t)
	importKube(t, k)
	ctx := context.Background()
	applyManifest(t, k, "rbac.yaml", nil)
	unbound := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "dsh-sandbox-unbound", Namespace: k.namespace}}
	if _, err := k.cli.CoreV1().ServiceAccounts(k.namespace).Create(ctx, unbound, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k.cli.CoreV1().ServiceAccounts(k.namespace).Delete(ctx, unbound.Name, metav1.DeleteOptions{})
	})
	if err := os.Chown(e.workspace, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	// asAccount is the CLI's environment with a kubeconfig of the
	// service account sa's token.
	asAccount := func(sa string) []string {
		tok, err := k.cli.CoreV1().ServiceAccounts(k.namespace).CreateToken(ctx, sa, &authv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token of %s: %v", sa, err)
		}
		kc := clientcmdapi.NewConfig()
		kc.Clusters["c"] = &clientcmdapi.Cluster{Server: k.cfg.Host, CertificateAuthorityData: k.cfg.CAData, CertificateAuthority: k.cfg.CAFile}
		kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
		kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: k.namespace}
		kc.CurrentContext = "x"
		file := filepath.Join(t.TempDir(), "kubeconfig")
		if err := clientcmd.WriteToFile(*kc, file); err != nil {
			t.Fatal(err)
		}
		env := slices.Clone(k.env)
		env[0] = "KUBECONFIG=" + file
		return env
	}
	doctor := func(env []string) map[string]bool {
		r := run(t, env, append(append([]string{"doctor"}, e.flags("")...), "--json")...)
		var reports []doctorReport
		if err := json.Unmarshal([]byte(r.stdout), &reports); err != nil {
			t.Fatalf("doctor --json printed %q: %v", r.stdout, err)
		}
		checks := map[string]bool{}
		for _, rep := range reports {
			if rep.Backend == kubernetes.Backend {
				for _, c := range rep.Checks {
					checks[c.Name] = c.OK
					t.Logf("doctor: %s %v: %s", c.Name, c.OK, c.Detail)
				}
			}
		}
		return checks
	}
	call := func(env []string) result {
		return run(t, env, append(append([]string{"exec"}, e.flags("")...), "--backend", "kubernetes", "--image", kubeImage, "--", "echo as-the-account")...)
	}

	bound := asAccount("dsh-sandbox")
	if c := doctor(bound); !c["cluster"] || !c["namespace"] || !c["permissions"] || !c["nodes"] || !c["runtimeclasses"] {
		t.Errorf("doctor as the service account of rbac.yaml = %v, want cluster, namespace, permissions, nodes and runtimeclasses ok", c)
	}
	if r := call(bound); r.code != 0 || r.stdout != "as-the-account\n" {
		t.Errorf("exec as the service account of rbac.yaml = %d, %q, %q; want the call's output", r.code, r.stdout, r.stderr)
	}
	none := asAccount(unbound.Name)
	if c := doctor(none); c["permissions"] {
		t.Errorf("doctor as a service account without the binding: permissions ok, want them missing (%v)", c)
	}
	if r := call(none); r.code != 125 || !strings.Contains(r.stderr, "forbidden") {
		t.Errorf("exec as a service account without the binding = %d, stderr %q; want 125 naming the refusal", r.code, r.stderr)
	}
	k.waitPods(t, "pods left", func(p []string) bool { return len(p) == 0 })
}

// TestKubernetesBench: `bench` measures the kubernetes backend on the
// cluster, against a bare pod's run through the API, in the same run as
// the oci backend: a cold series (a pod per call made on demand) and a
// warm one (one session's calls on warm pods). It imports its image into
// the node's containerd and leaves neither image nor pod behind.
func TestKubernetesBench(t *testing.T) {
	k := requireKube(t)
	e := newEnv(t)
	env := append(k.env, "DSH_SANDBOX_KUBE_NODE_CONTAINERD="+k.containerd)
	r := run(t, env, append([]string{"bench", "--n", "2", "--stream-bytes", "0", "--backend", "oci", "--backend", "kubernetes", "--json"}, e.flags("")...)...)
	if r.code != 0 {
		t.Fatalf("bench exited %d: %s", r.code, r.stderr)
	}
	rep := parseBench(t, r.stdout)
	want := map[string]string{"kubernetes": "pod run (API)", "kubernetes warm": "pod run (API)", "pod run (API)": "", "oci/runc": "raw runc run"}
	for _, row := range rep.Rows {
		base, ok := want[row.Name]
		if !ok {
			continue
		}
		delete(want, row.Name)
		if row.Error != "" || row.N != 2 || row.MedianMs <= 0 || row.P95Ms < row.MedianMs || (row.Name != "oci/runc" && row.Baseline != base) {
			t.Errorf("bench row %+v: want 2 samples, a median and p95, baseline %q", row, base)
		}
		if row.PoolHits > row.N || (row.PoolHits > 0 && row.Name != "kubernetes warm") {
			t.Errorf("bench row %+v: pool hits in a series without warm pods, or more than its calls", row)
		}
		t.Logf("bench %s: median %.1f ms, p95 %.1f ms, pool hits %d", row.Name, row.MedianMs, row.P95Ms, row.PoolHits)
	}
	if len(want) != 0 {
		t.Errorf("bench rows missing: %v (stdout %s)", want, r.stdout)
	}
	k.waitPods(t, "pods left after bench", func(p []string) bool { return len(p) == 0 })
	out, err := exec.Command("ctr", "--address", k.containerd, "-n", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil || strings.Contains(string(out), "dsh-sandbox-bench") {
		t.Errorf("ctr images ls after bench = %q, %v; want the bench image removed", out, err)
	}
}

// benchRow is a row of `bench --json`.
type benchRow struct {
	Name       string  `json:"name"`
	MedianMs   float64 `json:"medianMs"`
	P95Ms      float64 `json:"p95Ms"`
	Baseline   string  `json:"baseline"`
	VsBaseline float64 `json:"vsBaseline"`
	N          int     `json:"n"`
	PoolHits   int     `json:"poolHits"`
	Error      string  `json:"error"`
}

// parseBench reads what `bench --json` printed.
func parseBench(t *testing.T, stdout string) (rep struct{ Rows []benchRow }) {
	t.Helper()
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("bench --json printed %q: %v", stdout, err)
	}
	return rep
}
