package harness

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
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
		ControlPlaneTimeout:   20 * time.Minute,
		ControllerManagerArgs: map[string]string{"leader-elect-renew-deadline": "40s", "leader-elect-lease-duration": "60s"},
		Files:                 []SeedFile{{Path: "/run/x.sh", Owner: "root:root", Permissions: "0755", Content: "#!/bin/sh\n\necho 'x'\n"}},
		PreKubeadmCommands:    []string{"echo pre"}, PostKubeadmCommands: []string{"sh /run/x.sh"}}
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
		if m["kind"] == "ClusterConfiguration" {
			// extraArgs sorted by name; a component with none is {}.
			want := []any{map[string]any{"name": "leader-elect-lease-duration", "value": "60s"},
				map[string]any{"name": "leader-elect-renew-deadline", "value": "40s"}}
			if got := m["controllerManager"].(map[string]any)["extraArgs"]; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("controllerManager.extraArgs %v, want %v", got, want)
			}
			if got := m["scheduler"].(map[string]any); len(got) != 0 {
				t.Errorf("scheduler %v, want {}", got)
			}
		}
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

// TestKubeadmJoinUserData: a worker's user-data names the control plane,
// the token the init machine's configuration carries, and the pin of the
// CA the init machine's user-data holds.
func TestKubeadmJoinUserData(t *testing.T) {
	pki, err := NewClusterPKI()
	if err != nil {
		t.Fatal(err)
	}
	const token = "abcdef.0123456789abcdef"
	initUD, err := KubeadmInit{ClusterName: "c1", KubernetesVersion: K8sVersion, ControlPlaneEndpoint: "192.168.77.10:6443",
		AdvertiseAddress: "192.168.77.10", NodeIP: "192.168.77.10", BootstrapToken: token, PKI: pki}.UserData()
	if err != nil {
		t.Fatal(err)
	}
	joinUD, err := KubeadmJoin{APIServerEndpoint: "192.168.77.10:6443", Token: token, CACertHashes: []string{pki.CACertHash()},
		DiscoveryTimeout: 20 * time.Minute, NodeIP: "192.168.77.11"}.UserData()
	if err != nil {
		t.Fatal(err)
	}
	files := func(ud string) map[string]string {
		var doc struct {
			WriteFiles []struct{ Path, Content string } `yaml:"write_files"`
			Runcmd     []string
		}
		if err := yaml.Unmarshal([]byte(ud), &doc); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, ud)
		}
		m := map[string]string{"runcmd": strings.Join(doc.Runcmd, "\n")}
		for _, f := range doc.WriteFiles {
			m[f.Path] = f.Content
		}
		return m
	}
	in, join := files(initUD), files(joinUD)
	blk, _ := pem.Decode([]byte(in["/etc/kubernetes/pki/ca.crt"]))
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	if want := "sha256:" + hex.EncodeToString(sum[:]); pki.CACertHash() != want {
		t.Errorf("CACertHash %s, want %s", pki.CACertHash(), want)
	}
	var ic, jc map[string]any
	docs := strings.Split(in["/run/kubeadm/kubeadm.yaml"], "---\n")
	if err := yaml.Unmarshal([]byte(docs[len(docs)-1]), &ic); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(join["/run/kubeadm/kubeadm-join-config.yaml"]), &jc); err != nil {
		t.Fatal(err)
	}
	if got := ic["bootstrapTokens"].([]any)[0].(map[string]any)["token"]; got != token {
		t.Errorf("init token %v", got)
	}
	if got := ic["localAPIEndpoint"].(map[string]any)["advertiseAddress"]; got != "192.168.77.10" {
		t.Errorf("advertiseAddress %v", got)
	}
	bt := jc["discovery"].(map[string]any)["bootstrapToken"].(map[string]any)
	if jc["kind"] != "JoinConfiguration" || bt["token"] != token || bt["apiServerEndpoint"] != "192.168.77.10:6443" ||
		bt["caCertHashes"].([]any)[0] != pki.CACertHash() {
		t.Errorf("join configuration %v", jc)
	}
	nr := jc["nodeRegistration"].(map[string]any)
	if arg := nr["kubeletExtraArgs"].([]any)[0].(map[string]any); arg["name"] != "node-ip" || arg["value"] != "192.168.77.11" {
		t.Errorf("kubeletExtraArgs %v", nr["kubeletExtraArgs"])
	}
	if jc["timeouts"].(map[string]any)["discovery"] != "20m0s" {
		t.Errorf("timeouts %v", jc["timeouts"])
	}
	if want := "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete"; join["runcmd"] != want {
		t.Errorf("join runcmd %q", join["runcmd"])
	}
	if _, ok := join["/etc/kubernetes/pki/ca.key"]; ok {
		t.Error("a worker's user-data holds the CA key")
	}
}
