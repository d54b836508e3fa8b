package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// podShape is everything a call's pod fixes before the call is known:
// image, identity, mounts, limits, seccomp profile and runtime class. Two
// calls of the same shape can use each other's warm pods; nothing in it
// comes from the call's argv, environment or stdin.
type podShape struct {
	spec corev1.PodSpec
	// maxTimeout is the policy's longest call, for the backstop deadline
	// of a warm pod (its call is not known when it is made).
	maxTimeout time.Duration
	// key identifies the shape among warm pools.
	key string
}

// maskedPaths are the files every pod gets /dev/null over, besides the
// container runtime's own masks.
var maskedPaths = []string{"/sys/kernel/vmcoreinfo"}

// Requests of every pod: small, so that the scheduler places as many
// calls on a node as their limits allow to run at once.
var (
	requestCPU    = resource.MustParse("10m")
	requestMemory = resource.MustParse("16Mi")
)

// newPodShape builds the pod spec of a call of policy p with plan, run as
// uid:gid, on image (policy.image as podImage resolved it).
func newPodShape(p sandbox.Policy, image string, plan sandbox.Plan, uid, gid uint32, stubPath string, seccomp *corev1.SeccompProfile, runtimeClass string) (*podShape, error) {
	uid64, gid64 := int64(uid), int64(gid)
	nonRoot := uid != 0
	no, readonlyRoot := false, policy.ReadonlyRoot
	sc := &corev1.SecurityContext{
		RunAsUser:                &uid64,
		RunAsGroup:               &gid64,
		RunAsNonRoot:             &nonRoot,
		ReadOnlyRootFilesystem:   &readonlyRoot,
		AllowPrivilegeEscalation: &no,
		Privileged:               &no,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           seccomp,
	}
	volumes, mounts := podVolumes(plan, stubPath)
	spec := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		AutomountServiceAccountToken:  &no,
		EnableServiceLinks:            &no,
		TerminationGracePeriodSeconds: ptr(int64(0)),
		// The node's resolver configuration, named: under ClusterFirst a
		// kubelet without a cluster DNS falls back to it anyway, with an
		// event (two API writes) per pod.
		DNSPolicy: corev1.DNSDefault,
		SecurityContext: &corev1.PodSecurityContext{
			RunAsUser:      &uid64,
			RunAsGroup:     &gid64,
			RunAsNonRoot:   &nonRoot,
			SeccompProfile: seccomp,
		},
		Containers: []corev1.Container{{
			Name:            containerName,
			Image:           image,
			ImagePullPolicy: corev1.PullNever,
			Command:         []string{StubTarget, stub.AttachArg},
			WorkingDir:      "/",
			Stdin:           true,
			StdinOnce:       true,
			SecurityContext: sc,
			Resources:       podResources(p.Limits),
			VolumeMounts:    mounts,
			// The stub's own diagnostics only; the call's output
			// travels in frames on stdout.
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}},
		Volumes: volumes,
	}
	if runtimeClass != "" {
		spec.RuntimeClassName = &runtimeClass
	}
	maxTimeout := time.Duration(policy.LimitsOrDefault(p.Limits).MaxTimeoutMs) * time.Millisecond
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "kubernetes: pod spec: %v", err)
	}
	sum := sha256.Sum256(b)
	return &podShape{spec: spec, maxTimeout: maxTimeout, key: hex.EncodeToString(sum[:])}, nil
}

// podResources returns the limits l of a call's container (a zero limit
// takes its default, policy.LimitsOrDefault, as on every other backend:
// never none) and its requests: requestCPU and requestMemory, or the
// limit where that is lower.
func podResources(l sandbox.Limits) corev1.ResourceRequirements {
	l = policy.LimitsOrDefault(l)
	limits := corev1.ResourceList{}
	if l.MemoryBytes > 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(l.MemoryBytes, resource.BinarySI)
	}
	if l.CPUs > 0 {
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(math.Ceil(l.CPUs*1000)), resource.DecimalSI)
	}
	requests := corev1.ResourceList{corev1.ResourceCPU: requestCPU, corev1.ResourceMemory: requestMemory}
	for k, v := range requests {
		if lim, ok := limits[k]; ok && lim.Cmp(v) < 0 {
			requests[k] = lim
		}
	}
	return corev1.ResourceRequirements{Limits: limits, Requests: requests}
}

// podVolumes returns the volumes of a call's pod and their mounts in its
// container: the stub at stubPath, /dev/null over maskedPaths, and the
// mounts of plan, each a hostPath (a bind) or a memory-backed emptyDir.
func podVolumes(plan sandbox.Plan, stubPath string) ([]corev1.Volume, []corev1.VolumeMount) {
	stubType := corev1.HostPathFile
	volumes := []corev1.Volume{{
		Name:         "stub",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: stubPath, Type: &stubType}},
	}}
	mounts := []corev1.VolumeMount{{Name: "stub", MountPath: StubTarget, ReadOnly: true}}
	// The kernel facts the container runtime's default masks leave
	// readable (the host's boot line, the kernel's crash-dump
	// addresses), hidden as the other backends hide them: /dev/null
	// over them. The pod API has no maskedPaths.
	nullType := corev1.HostPathCharDev
	volumes = append(volumes, corev1.Volume{Name: "mask", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/null", Type: &nullType}}})
	for _, p := range maskedPaths {
		mounts = append(mounts, corev1.VolumeMount{Name: "mask", MountPath: p, ReadOnly: true})
	}
	for i, m := range plan.Mounts {
		name := "m" + strconv.Itoa(i)
		if m.Bind() {
			// The path exists: prepare.Paths made or checked it.
			t := corev1.HostPathUnset
			volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: m.Source, Type: &t}}})
		} else {
			ed := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
			if m.SizeBytes > 0 {
				ed.SizeLimit = resource.NewQuantity(m.SizeBytes, resource.BinarySI)
			}
			volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: ed}})
		}
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: m.Target, ReadOnly: !m.Writable})
	}
	return volumes, mounts
}

// deadline is a pod's activeDeadlineSeconds for a call of timeout: the
// stub ends the call at its deadline; this backstop ends the pod if the
// stub does not.
func (s *podShape) deadline(timeout, grace time.Duration) int64 {
	return int64((timeout+grace)/time.Second) + 30
}

// pod returns the pod of this shape called name.
func (s *podShape) pod(name, namespace, instance string, deadlineSeconds int64) *corev1.Pod {
	spec := *s.spec.DeepCopy()
	spec.ActiveDeadlineSeconds = &deadlineSeconds
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels: map[string]string{
				reap.LabelOwner:    reap.LabelOwnerValue,
				reap.LabelInstance: instance,
				labelSlot:          name,
			},
		},
		Spec: spec,
	}
}

func ptr[T any](v T) *T { return &v }

// seccompProfile writes the policy's profile into the kubelet's seccomp
// directory once, under a name that is its content's digest.
type seccompProfile struct {
	dir  string
	once sync.Once
	name string
	err  error
}

// seccompFor returns the seccomp profile of a call's pod: the policy's
// profile (Docker's default, narrowed so that no set-id mode can be set:
// the oci and containerd backends' filter) as a Localhost profile, or the
// runtime's default when the executor was told to use it.
func (e *Executor) seccompFor(sandbox.Policy) (*corev1.SeccompProfile, error) {
	if e.seccomp == nil {
		if e.opts.RuntimeDefaultSeccomp {
			return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}, nil
		}
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: no seccomp directory of the kubelet configured (DSH_SANDBOX_KUBE_SECCOMP_DIR), so the policy's seccomp profile cannot reach the pods; or accept the runtime's default profile explicitly (DSH_SANDBOX_KUBE_SECCOMP=runtime-default)")
	}
	name, err := e.seccomp.write()
	if err != nil {
		return nil, err
	}
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}, nil
}

// write writes the profile and returns its name relative to the
// directory.
func (s *seccompProfile) write() (string, error) {
	s.once.Do(func() {
		spec := &specs.Spec{}
		for _, o := range []policy.SpecOpt{policy.WithDefaultSeccomp(), policy.WithoutSetidModes()} {
			if err := o(spec); err != nil {
				s.err = sandbox.Errorf(sandbox.ErrInternal, "kubernetes: seccomp profile: %v", err)
				return
			}
		}
		b, err := json.Marshal(spec.Linux.Seccomp)
		if err != nil {
			s.err = sandbox.Errorf(sandbox.ErrInternal, "kubernetes: seccomp profile: %v", err)
			return
		}
		sum := sha256.Sum256(b)
		rel := filepath.Join("dsh-sandbox", hex.EncodeToString(sum[:8])+".json")
		path := filepath.Join(s.dir, rel)
		if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
			s.name = rel
			return
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			s.err = sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: seccomp directory: %v", err)
			return
		}
		tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			s.err = sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: seccomp profile: %v", err)
			return
		}
		if err := os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
			s.err = sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: seccomp profile: %v", err)
			return
		}
		s.name = rel
	})
	return s.name, s.err
}
