package kubernetes

import (
	"context"
	"os"
	"path/filepath"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Reap deletes the pods that dead instances of this state directory
// left (their lock file exists and is no longer held): calls whose
// service died, and warm pods nobody will take. Pods of live instances,
// and of instances this state directory does not know (another host's
// service), are left alone; their own activeDeadlineSeconds ends them.
func (e *Executor) Reap(ctx context.Context) (reap.Report, error) {
	var rep reap.Report
	dir := instancesDir(e.opts.StateDir)
	dead, release, err := reap.LockDeadInstances(dir, e.instance)
	if err != nil {
		return rep, err
	}
	defer release()
	if len(dead) == 0 {
		return rep, nil
	}
	l, err := e.cli.CoreV1().Pods(e.opts.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{reap.LabelOwner: reap.LabelOwnerValue}.String(),
	})
	if err != nil {
		return rep, classify(err, "list pods")
	}
	for _, p := range l.Items {
		inst := p.Labels[reap.LabelInstance]
		if _, ok := dead[inst]; !ok {
			continue
		}
		if err := e.deletePod(ctx, p.Name); err != nil {
			return rep, classify(err, "reap")
		}
		rep.Containers = append(rep.Containers, "pod/"+p.Name)
	}
	for inst := range dead {
		_ = os.Remove(filepath.Join(dir, inst+".lock"))
		rep.Instances = append(rep.Instances, inst)
	}
	return rep, nil
}
