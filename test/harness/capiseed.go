package harness

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"time"
)

// KubeadmInit describes the first control-plane machine of a cluster as
// Cluster API's kubeadm bootstrap provider (CABPK) sees it: the fields of
// a Cluster and a KubeadmConfig (bootstrap.cluster.x-k8s.io) that shape
// the cloud-init user-data it renders for "kubeadm init".
type KubeadmInit struct {
	ClusterName          string // Cluster.metadata.name → ClusterConfiguration.clusterName
	KubernetesVersion    string // Machine.spec.version → kubernetesVersion
	ControlPlaneEndpoint string // Cluster.spec.controlPlaneEndpoint, host:port
	ImageRepository      string // clusterConfiguration.imageRepository
	PodSubnet            string // Cluster.spec.clusterNetwork.pods.cidrBlocks[0]
	ServiceSubnet        string // Cluster.spec.clusterNetwork.services.cidrBlocks[0]
	// ControlPlaneTimeout is clusterConfiguration.apiServer.
	// timeoutForControlPlane, which CABPK writes as v1beta4's
	// timeouts.controlPlaneComponentHealthCheck; zero keeps kubeadm's
	// default of four minutes.
	ControlPlaneTimeout time.Duration
	// IgnorePreflightErrors is initConfiguration.nodeRegistration.
	// ignorePreflightErrors.
	IgnorePreflightErrors []string
	// Files are KubeadmConfig.spec.files, written after the certificates.
	Files []SeedFile
	// PreKubeadmCommands and PostKubeadmCommands are the spec fields of
	// those names: runcmd lines before and after kubeadm init.
	PreKubeadmCommands, PostKubeadmCommands []string
}

// SeedFile is one KubeadmConfig.spec.files entry.
type SeedFile struct {
	Path, Owner, Permissions, Content string
}

// jinjaRE finds what jinja takes for a statement, an expression or a
// comment.
var jinjaRE = regexp.MustCompile(`\{[{%#]`)

// kubeadmSentinel is the file CABPK's runcmd writes once kubeadm
// succeeded; infrastructure providers read it to mark the machine
// bootstrapped.
const kubeadmSentinel = "/run/cluster-api/bootstrap-success.complete"

// UserData renders the cloud-config CABPK writes for an init machine
// (bootstrap/kubeadm/internal/cloudinit: controlplane_init.go's template
// and the files and commands templates beside it):
//   - the "## template: jinja" header, so cloud-init renders
//     {{ ds.meta_data.local_hostname }} into the node's name;
//   - write_files: the cluster's certificate authorities and the
//     service-account key pair, which Cluster API generates and keeps in
//     Secrets (util/secret: ca, etcd/ca, front-proxy-ca, sa), owner
//     root:root, certificates '0640' and keys '0600'; then spec.files; then
//     /run/kubeadm/kubeadm.yaml (ClusterConfiguration, then
//     InitConfiguration) and /run/cluster-api/placeholder;
//   - runcmd: preKubeadmCommands, "kubeadm init --config
//     /run/kubeadm/kubeadm.yaml && echo success > SENTINEL", then
//     postKubeadmCommands.
//
// The certificates are new on every call.
func (k KubeadmInit) UserData() (string, error) {
	// cloud-init renders the whole user-data as a jinja template, so
	// braces meant for another tool would be rendered or refused, and
	// cloud-init would then run none of it.
	for _, f := range k.Files {
		if jinjaRE.MatchString(f.Content) {
			return "", fmt.Errorf("file %s: jinja would render %q", f.Path, jinjaRE.FindString(f.Content))
		}
	}
	for _, c := range append(slices.Clone(k.PreKubeadmCommands), k.PostKubeadmCommands...) {
		if jinjaRE.MatchString(c) {
			return "", fmt.Errorf("command %q: jinja would render %q", c, jinjaRE.FindString(c))
		}
	}
	pki, err := clusterPKI(k.ClusterName)
	if err != nil {
		return "", err
	}
	files := append(pki, k.Files...)
	files = append(files,
		SeedFile{Path: "/run/kubeadm/kubeadm.yaml", Owner: "root:root", Permissions: "0640",
			Content: "---\n" + k.clusterConfiguration() + "---\n" + k.initConfiguration()},
		// CABPK's own words: it makes /run/cluster-api in a way Windows
		// nodes understand too.
		SeedFile{Path: "/run/cluster-api/placeholder", Owner: "root:root", Permissions: "0640",
			Content: "This placeholder file is used to create the /run/cluster-api sub directory in a way that is compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with Windows)"},
	)
	var b strings.Builder
	b.WriteString("## template: jinja\n#cloud-config\n\nwrite_files:\n")
	for _, f := range files {
		fmt.Fprintf(&b, "-   path: %s\n    owner: %s\n    permissions: '%s'\n    content: |\n", f.Path, f.Owner, f.Permissions)
		for _, l := range strings.Split(strings.TrimSuffix(f.Content, "\n"), "\n") {
			if l == "" {
				b.WriteString("\n")
			} else {
				b.WriteString("      " + l + "\n")
			}
		}
	}
	b.WriteString("runcmd:\n")
	for _, c := range k.PreKubeadmCommands {
		fmt.Fprintf(&b, "  - %q\n", c)
	}
	fmt.Fprintf(&b, "  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > %s'\n", kubeadmSentinel)
	for _, c := range k.PostKubeadmCommands {
		fmt.Fprintf(&b, "  - %q\n", c)
	}
	return b.String(), nil
}

// clusterConfiguration is kubeadm v1beta4's ClusterConfiguration as CABPK
// marshals it for Kubernetes v1.31 (keys sorted, empty components as {}).
func (k KubeadmInit) clusterConfiguration() string {
	return `apiServer: {}
apiVersion: kubeadm.k8s.io/v1beta4
clusterName: ` + k.ClusterName + `
controlPlaneEndpoint: ` + k.ControlPlaneEndpoint + `
controllerManager: {}
dns: {}
etcd: {}
imageRepository: ` + k.ImageRepository + `
kind: ClusterConfiguration
kubernetesVersion: ` + k.KubernetesVersion + `
networking:
  dnsDomain: cluster.local
  podSubnet: ` + k.PodSubnet + `
  serviceSubnet: ` + k.ServiceSubnet + `
scheduler: {}
`
}

// initConfiguration is the InitConfiguration: the node named from the
// datasource's metadata, the containerd socket, images pulled only when
// absent (CABPK's default imagePullPolicy), and no taints override.
func (k KubeadmInit) initConfiguration() string {
	s := `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint: {}
nodeRegistration:
  criSocket: unix:///run/containerd/containerd.sock
  imagePullPolicy: IfNotPresent
  name: '{{ ds.meta_data.local_hostname }}'
`
	if len(k.IgnorePreflightErrors) > 0 {
		s = strings.Replace(s, "  imagePullPolicy:", "  ignorePreflightErrors:\n  - "+strings.Join(k.IgnorePreflightErrors, "\n  - ")+"\n  imagePullPolicy:", 1)
	}
	if k.ControlPlaneTimeout > 0 {
		s += "timeouts:\n  controlPlaneComponentHealthCheck: " + k.ControlPlaneTimeout.String() + "\n"
	}
	return s
}

// clusterPKI makes what Cluster API generates before the first machine
// (util/secret.NewCertificatesForInitialControlPlane): three certificate
// authorities and the service-account signing key, as seed files.
func clusterPKI(cluster string) ([]SeedFile, error) {
	var files []SeedFile
	for _, ca := range []struct{ base, cn string }{
		{"/etc/kubernetes/pki/ca", "kubernetes"},
		{"/etc/kubernetes/pki/etcd/ca", "etcd-ca"},
		{"/etc/kubernetes/pki/front-proxy-ca", "front-proxy-ca"},
	} {
		cert, key, err := selfSignedCA(ca.cn)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %s: %w", cluster, ca.cn, err)
		}
		files = append(files,
			SeedFile{Path: ca.base + ".crt", Owner: "root:root", Permissions: "0640", Content: cert},
			SeedFile{Path: ca.base + ".key", Owner: "root:root", Permissions: "0600", Content: key})
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	return append(files,
		SeedFile{Path: "/etc/kubernetes/pki/sa.pub", Owner: "root:root", Permissions: "0640",
			Content: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))},
		SeedFile{Path: "/etc/kubernetes/pki/sa.key", Owner: "root:root", Permissions: "0600",
			Content: string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)}))},
	), nil
}

// selfSignedCA is a ten-year RSA certificate authority, as Cluster API's
// util/certs makes one, in PEM.
func selfSignedCA(cn string) (cert, key string, err error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", err
	}
	now := time.Now().UTC()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		DNSNames:              []string{cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return "", "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})), nil
}
