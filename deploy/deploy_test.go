// Package deploy holds the Kubernetes manifests that run stamp as a pod;
// its test checks them against Kubernetes' own API types.
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/stamp-dev/stamp/recipes"
)

// documents splits every manifest in this directory into its YAML
// documents, each named FILE#N.
func documents(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests (%v)", err)
	}
	docs := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range bytes.Split(b, []byte("\n---\n")) {
			docs[fmt.Sprintf("%s#%d", f, i+1)] = d
		}
	}
	return docs
}

// TestManifests decodes every document strictly into its Kubernetes type
// (an unknown or misspelt field fails), and holds each Job and Deployment to
// what a restricted pod needs and what stamp needs: non-root, no
// capabilities, no privilege escalation, a read-only root, emptyDir work and
// cache volumes, every mount backed by a volume, and every recipe it carries
// parsing as a stamp recipe; stamp serve's Deployment also to its Service.
func TestManifests(t *testing.T) {
	var cms []*corev1.ConfigMap
	var jobs []*batchv1.Job
	var deployments []*appsv1.Deployment
	var services []*corev1.Service
	for name, doc := range documents(t) {
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var obj any
		switch meta.APIVersion + " " + meta.Kind {
		case "v1 ConfigMap":
			cm := &corev1.ConfigMap{}
			obj = cm
			cms = append(cms, cm)
		case "batch/v1 Job":
			j := &batchv1.Job{}
			obj = j
			jobs = append(jobs, j)
		case "apps/v1 Deployment":
			d := &appsv1.Deployment{}
			obj = d
			deployments = append(deployments, d)
		case "v1 Service":
			svc := &corev1.Service{}
			obj = svc
			services = append(services, svc)
		default:
			t.Fatalf("%s: %s %s is not a kind this test knows", name, meta.APIVersion, meta.Kind)
		}
		// Decoded as the API server decodes: field names match exactly
		// (encoding/json would take readOnlyRootFileSystem), and an
		// unknown or repeated field is an error.
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, e := range strict {
			t.Errorf("%s: %v", name, e)
		}
	}
	if len(jobs) == 0 {
		t.Fatal("no Job")
	}
	configMaps := map[string]*corev1.ConfigMap{}
	for _, cm := range cms {
		configMaps[cm.Name] = cm
	}
	for _, j := range jobs {
		checkJob(t, j, configMaps)
	}
	if len(deployments) == 0 {
		t.Fatal("no Deployment")
	}
	for _, d := range deployments {
		checkServe(t, d, services, configMaps)
	}
}

func checkJob(t *testing.T, j *batchv1.Job, configMaps map[string]*corev1.ConfigMap) {
	t.Helper()
	pod := j.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever && pod.RestartPolicy != corev1.RestartPolicyOnFailure {
		t.Errorf("%s: restartPolicy %q, a Job needs Never or OnFailure", j.Name, pod.RestartPolicy)
	}
	checkPod(t, j.Name, pod, []string{"/work", "/cache"}, configMaps)
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		// Pods start with empty disks: the build cache is shared through a
		// registry, read and written under one reference.
		cmd := strings.Join(append(append([]string{}, c.Command...), c.Args...), " ")
		if strings.Contains(cmd, "stamp build") &&
			(!strings.Contains(cmd, `--cache-from "$CACHE_REF"`) || !strings.Contains(cmd, `--cache-to "$CACHE_REF"`) || !hasEnv(c, "CACHE_REF")) {
			t.Errorf("%s/%s: the build must read and write the shared cache (--cache-from and --cache-to $CACHE_REF): %s", j.Name, c.Name, cmd)
		}
		if j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion {
			checkMatrix(t, j, cmd, pod.Volumes, configMaps)
		}
	}
}

// checkPod holds a pod to the restricted pod security every manifest here
// keeps, and to what stamp needs: emptyDir volumes at each of emptyDirs,
// every mount backed by a volume, and every recipe of a ConfigMap it
// mounts parsing as a stamp recipe.
func checkPod(t *testing.T, name string, pod corev1.PodSpec, emptyDirs []string, configMaps map[string]*corev1.ConfigMap) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: the pod must run as a non-root user: %+v", name, psc)
	}
	if psc != nil && (psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
		t.Errorf("%s: the pod must use the runtime's default seccomp profile", name)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: stamp needs no service account token; do not mount one", name)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s/%s: no securityContext", name, c.Name)
			continue
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s/%s: the root file system must be read-only", name, c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s/%s: privilege escalation must be off", name, c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) != 0:
			t.Errorf("%s/%s: every capability must be dropped and none added", name, c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("%s/%s: privileged", name, c.Name)
		}
		mounted := map[string]string{}
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				t.Errorf("%s/%s: mount %s names no volume", name, c.Name, m.Name)
			}
			mounted[m.MountPath] = m.Name
		}
		for _, p := range emptyDirs {
			if v, ok := volumes[mounted[p]]; !ok || v.EmptyDir == nil {
				t.Errorf("%s/%s: %s must be an emptyDir volume", name, c.Name, p)
			}
		}
	}
	for _, v := range pod.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		cm := configMaps[v.ConfigMap.Name]
		if cm == nil {
			t.Errorf("%s: volume %s names ConfigMap %s, which no manifest here defines", name, v.Name, v.ConfigMap.Name)
			continue
		}
		for key, data := range cm.Data {
			if !strings.HasSuffix(key, ".yaml") {
				continue
			}
			set := map[string]string{}
			if _, err := recipes.ParseWith([]byte(data), key, recipes.Options{Set: placeholders(data, set)}); err != nil {
				t.Errorf("ConfigMap %s, %s: %v", cm.Name, key, err)
			}
		}
	}
}

// checkServe holds stamp serve's Deployment to what the server needs: two
// replicas or more sharing the cache through the registry, the recipes from
// a ConfigMap, tokens from a Secret, the cache on an emptyDir, probes on
// /healthz and /readyz, and a Service that reaches the pods' port and keeps
// a client on one replica.
func checkServe(t *testing.T, d *appsv1.Deployment, services []*corev1.Service, configMaps map[string]*corev1.ConfigMap) {
	t.Helper()
	pod := d.Spec.Template.Spec
	if pod.RestartPolicy != "" && pod.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("%s: restartPolicy %q, a Deployment restarts always", d.Name, pod.RestartPolicy)
	}
	checkPod(t, d.Name, pod, []string{"/cache", "/tmp"}, configMaps)
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("%s: fewer than two replicas share nothing", d.Name)
	}
	if d.Spec.Selector == nil || !labelsMatch(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("%s: the selector does not select the pods", d.Name)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers, want the server's alone", d.Name, len(pod.Containers))
	}
	c := pod.Containers[0]
	args := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	if cmd := strings.Join(c.Command, " "); cmd != "stamp serve" {
		t.Errorf("%s: command %q, want stamp serve", d.Name, cmd)
	}
	if args["--cache-from"] != "$(CACHE_REF)" || args["--cache-to"] != "$(CACHE_REF)" || !hasEnv(c, "CACHE_REF") {
		t.Errorf("%s: the replicas must read and write the shared cache (--cache-from and --cache-to $(CACHE_REF)): %q", d.Name, c.Args)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	volume := func(flag string) *corev1.Volume {
		dir := args[flag]
		if flag == "--tokens" {
			dir = path.Dir(dir)
		}
		for _, v := range pod.Volumes {
			if m, ok := mounts[dir]; ok && m.Name == v.Name {
				return &v
			}
		}
		t.Errorf("%s: %s %q is on no volume", d.Name, flag, args[flag])
		return nil
	}
	if v := volume("--recipes"); v != nil && (v.ConfigMap == nil || !mounts[args["--recipes"]].ReadOnly) {
		t.Errorf("%s: the recipes come from a ConfigMap, mounted read-only", d.Name)
	}
	if v := volume("--tokens"); v != nil && v.Secret == nil {
		t.Errorf("%s: the tokens come from a Secret", d.Name)
	}
	if v := volume("--cache-dir"); v != nil && v.EmptyDir == nil {
		t.Errorf("%s: the cache is an emptyDir", d.Name)
	}
	var port corev1.ContainerPort
	for _, p := range c.Ports {
		if strings.HasSuffix(args["--listen"], fmt.Sprintf(":%d", p.ContainerPort)) {
			port = p
		}
	}
	if port.Name == "" {
		t.Fatalf("%s: no named container port is the --listen %q", d.Name, args["--listen"])
	}
	for _, probe := range []struct {
		p    *corev1.Probe
		path string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if probe.p == nil || probe.p.HTTPGet == nil || probe.p.HTTPGet.Path != probe.path || probe.p.HTTPGet.Port.String() != port.Name {
			t.Errorf("%s: want a probe of %s on port %s", d.Name, probe.path, port.Name)
		}
	}
	found := false
	for _, svc := range services {
		if !labelsMatch(svc.Spec.Selector, d.Spec.Template.Labels) {
			continue
		}
		found = true
		if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
			t.Errorf("Service %s: a client must stay on one replica (sessionAffinity: ClientIP)", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.String() != port.Name {
				t.Errorf("Service %s: port %d targets %s, not the server's %s", svc.Name, p.Port, p.TargetPort.String(), port.Name)
			}
		}
	}
	if !found {
		t.Errorf("%s: no Service selects its pods", d.Name)
	}
}

// labelsMatch tells whether every label of sel is among labels.
func labelsMatch(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// placeholders gives every parameter the recipe declares without a
// default a value, as the Job's --set does at run time.
func placeholders(recipe string, set map[string]string) map[string]string {
	var r struct {
		Params map[string]struct {
			Default any `json:"default"`
		} `json:"params"`
	}
	if err := yaml.Unmarshal([]byte(recipe), &r); err == nil {
		for name, p := range r.Params {
			if p.Default == nil {
				set[name] = "file:///placeholder"
			}
		}
	}
	return set
}

func hasEnv(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name && e.Value != "" {
			return true
		}
	}
	return false
}

// checkMatrix holds an Indexed Job to building one recipe per index: its
// command names recipe-$JOB_COMPLETION_INDEX.yaml, and its ConfigMap holds
// exactly recipe-0.yaml up to the last index.
func checkMatrix(t *testing.T, j *batchv1.Job, cmd string, volumes []corev1.Volume, configMaps map[string]*corev1.ConfigMap) {
	t.Helper()
	if !strings.Contains(cmd, "recipe-$JOB_COMPLETION_INDEX.yaml") {
		t.Errorf("%s: an Indexed Job builds recipe-$JOB_COMPLETION_INDEX.yaml: %s", j.Name, cmd)
	}
	if j.Spec.Completions == nil || *j.Spec.Completions < 2 {
		t.Fatalf("%s: a matrix of fewer than two recipes", j.Name)
	}
	n := int(*j.Spec.Completions)
	for _, v := range volumes {
		if v.ConfigMap == nil {
			continue
		}
		cm := configMaps[v.ConfigMap.Name]
		if cm == nil || len(cm.Data) != n {
			t.Errorf("%s: %d completions, but ConfigMap %s holds %d recipes", j.Name, n, v.ConfigMap.Name, len(cm.Data))
			continue
		}
		for i := 0; i < n; i++ {
			if _, ok := cm.Data[fmt.Sprintf("recipe-%d.yaml", i)]; !ok {
				t.Errorf("%s: ConfigMap %s has no recipe-%d.yaml", j.Name, cm.Name, i)
			}
		}
	}
}
