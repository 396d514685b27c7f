package harness

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// TestKubeadmInitUserData checks the rendered user-data as cloud-init and
// kubeadm will read it: a jinja-templated cloud-config whose files come in
// CABPK's order with valid certificate authorities, a kubeadm.yaml of two
// documents, and runcmd around kubeadm init.
func TestKubeadmInitUserData(t *testing.T) {
	k := KubeadmInit{ClusterName: "c1", KubernetesVersion: K8sVersion, ControlPlaneEndpoint: "10.0.2.15:6443",
		ImageRepository: "127.0.0.1:5000", PodSubnet: "10.85.0.0/16", ServiceSubnet: "10.96.0.0/12",
		ControlPlaneTimeout: 20 * time.Minute,
		Files:               []SeedFile{{Path: "/run/x.sh", Owner: "root:root", Permissions: "0755", Content: "#!/bin/sh\n\necho 'x'\n"}},
		PreKubeadmCommands:  []string{"echo pre"}, PostKubeadmCommands: []string{"sh /run/x.sh"}}
	ud, err := k.UserData()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ud, "## template: jinja\n#cloud-config\n") {
		t.Fatalf("header:\n%s", ud[:40])
	}
	var doc struct {
		WriteFiles []struct{ Path, Owner, Permissions, Content string } `yaml:"write_files"`
		Runcmd     []string
	}
	if err := yaml.Unmarshal([]byte(ud), &doc); err != nil {
		t.Fatalf("user-data is not YAML: %v\n%s", err, ud)
	}
	var paths []string
	byPath := map[string]string{}
	for _, f := range doc.WriteFiles {
		paths = append(paths, f.Path)
		byPath[f.Path] = f.Content
		want := "0640"
		if strings.HasSuffix(f.Path, ".key") {
			want = "0600"
		} else if f.Path == "/run/x.sh" {
			want = "0755"
		}
		if f.Owner != "root:root" || f.Permissions != want {
			t.Errorf("%s: owner %s permissions %s, want root:root %s", f.Path, f.Owner, f.Permissions, want)
		}
	}
	wantPaths := []string{"/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/pki/ca.key", "/etc/kubernetes/pki/etcd/ca.crt",
		"/etc/kubernetes/pki/etcd/ca.key", "/etc/kubernetes/pki/front-proxy-ca.crt", "/etc/kubernetes/pki/front-proxy-ca.key",
		"/etc/kubernetes/pki/sa.pub", "/etc/kubernetes/pki/sa.key", "/run/x.sh", "/run/kubeadm/kubeadm.yaml", "/run/cluster-api/placeholder"}
	if strings.Join(paths, " ") != strings.Join(wantPaths, " ") {
		t.Errorf("write_files paths\n got %q\nwant %q", paths, wantPaths)
	}
	if byPath["/run/x.sh"] != "#!/bin/sh\n\necho 'x'\n" {
		t.Errorf("a file's content did not survive: %q", byPath["/run/x.sh"])
	}
	for _, n := range []string{"ca", "etcd/ca", "front-proxy-ca"} {
		blk, _ := pem.Decode([]byte(byPath["/etc/kubernetes/pki/"+n+".crt"]))
		if blk == nil {
			t.Fatalf("%s.crt is not PEM", n)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil || !c.IsCA || c.CheckSignatureFrom(c) != nil {
			t.Errorf("%s.crt is not a self-signed CA: %v", n, err)
		}
	}
	var kinds []string
	dec := yaml.NewDecoder(strings.NewReader(byPath["/run/kubeadm/kubeadm.yaml"]))
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			break
		}
		kinds = append(kinds, m["kind"].(string)+" "+m["apiVersion"].(string))
		if m["kind"] == "InitConfiguration" {
			nr := m["nodeRegistration"].(map[string]any)
			if nr["name"] != "{{ ds.meta_data.local_hostname }}" || nr["imagePullPolicy"] != "IfNotPresent" {
				t.Errorf("nodeRegistration %v", nr)
			}
			if to := m["timeouts"].(map[string]any); to["controlPlaneComponentHealthCheck"] != "20m0s" {
				t.Errorf("timeouts %v", to)
			}
		}
	}
	if strings.Join(kinds, ", ") != "ClusterConfiguration kubeadm.k8s.io/v1beta4, InitConfiguration kubeadm.k8s.io/v1beta4" {
		t.Errorf("kubeadm.yaml documents: %v", kinds)
	}
	wantCmd := []string{"echo pre", "kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete", "sh /run/x.sh"}
	if strings.Join(doc.Runcmd, "\n") != strings.Join(wantCmd, "\n") {
		t.Errorf("runcmd %q, want %q", doc.Runcmd, wantCmd)
	}
}

// TestKubeadmInitUserDataRefusesJinja: cloud-init would render braces in a
// file or command as jinja, and run none of the user-data if it could not.
func TestKubeadmInitUserDataRefusesJinja(t *testing.T) {
	for _, k := range []KubeadmInit{
		{Files: []SeedFile{{Path: "/run/a.sh", Content: "crictl inspect -o go-template --template '{{.status}}'"}}},
		{PostKubeadmCommands: []string{"echo {% raw %}"}},
	} {
		if _, err := k.UserData(); err == nil || !strings.Contains(err.Error(), "jinja would render") {
			t.Errorf("%+v: err %v, want a jinja error", k, err)
		}
	}
}
