package harness

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"regexp"
	"slices"
	"strconv"
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
	// AdvertiseAddress is initConfiguration.localAPIEndpoint.
	// advertiseAddress; empty lets kubeadm take the default route's.
	AdvertiseAddress string
	// NodeIP is the kubelet's node-ip, in nodeRegistration.
	// kubeletExtraArgs; empty lets kubelet choose.
	NodeIP string
	// BootstrapToken is initConfiguration.bootstrapTokens[0].token, which
	// joining machines present; empty leaves kubeadm to make one.
	BootstrapToken string
	// PKI is the cluster's certificate authorities; nil makes new ones.
	PKI *ClusterPKI
	// ControllerManagerArgs and SchedulerArgs are clusterConfiguration.
	// controllerManager.extraArgs and scheduler.extraArgs, flag name to
	// value, as a KubeadmControlPlane's spec sets them.
	ControllerManagerArgs, SchedulerArgs map[string]string
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
	if err := checkJinja(k.Files, k.PreKubeadmCommands, k.PostKubeadmCommands); err != nil {
		return "", err
	}
	pki := k.PKI
	if pki == nil {
		var err error
		if pki, err = NewClusterPKI(); err != nil {
			return "", fmt.Errorf("cluster %s: %w", k.ClusterName, err)
		}
	}
	files := append(slices.Clone(pki.files), k.Files...)
	files = append(files, SeedFile{Path: "/run/kubeadm/kubeadm.yaml", Owner: "root:root", Permissions: "0640",
		Content: "---\n" + k.clusterConfiguration() + "---\n" + k.initConfiguration()})
	return renderUserData(files, k.PreKubeadmCommands, "kubeadm init --config /run/kubeadm/kubeadm.yaml ", k.PostKubeadmCommands)
}

// KubeadmJoin describes a worker machine as CABPK sees it: a
// KubeadmConfig whose joinConfiguration names the control plane.
type KubeadmJoin struct {
	APIServerEndpoint string   // discovery.bootstrapToken.apiServerEndpoint, host:port
	Token             string   // discovery.bootstrapToken.token
	CACertHashes      []string // discovery.bootstrapToken.caCertHashes
	// DiscoveryTimeout is joinConfiguration.discovery.timeout, v1beta4's
	// timeouts.discovery; zero keeps kubeadm's five minutes.
	DiscoveryTimeout time.Duration
	NodeIP           string // kubelet's node-ip, as in KubeadmInit
	Files            []SeedFile
	// PreKubeadmCommands and PostKubeadmCommands as in KubeadmInit.
	PreKubeadmCommands, PostKubeadmCommands []string
}

// UserData renders the cloud-config CABPK writes for a worker
// (cloudinit/node.go's template): spec.files, then
// /run/kubeadm/kubeadm-join-config.yaml and the placeholder; runcmd runs
// "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml" between
// the pre- and post-commands, and writes the sentinel when it succeeds.
func (k KubeadmJoin) UserData() (string, error) {
	if err := checkJinja(k.Files, k.PreKubeadmCommands, k.PostKubeadmCommands); err != nil {
		return "", err
	}
	var c strings.Builder
	c.WriteString("---\napiVersion: kubeadm.k8s.io/v1beta4\ndiscovery:\n  bootstrapToken:\n")
	fmt.Fprintf(&c, "    apiServerEndpoint: %s\n    caCertHashes:\n", k.APIServerEndpoint)
	for _, h := range k.CACertHashes {
		fmt.Fprintf(&c, "    - %s\n", h)
	}
	fmt.Fprintf(&c, "    token: %s\nkind: JoinConfiguration\n%s", k.Token, nodeRegistration(k.NodeIP))
	if k.DiscoveryTimeout > 0 {
		fmt.Fprintf(&c, "timeouts:\n  discovery: %s\n", k.DiscoveryTimeout)
	}
	files := append(slices.Clone(k.Files), SeedFile{Path: "/run/kubeadm/kubeadm-join-config.yaml", Owner: "root:root",
		Permissions: "0640", Content: c.String()})
	return renderUserData(files, k.PreKubeadmCommands, "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml ", k.PostKubeadmCommands)
}

// checkJinja refuses the caller's files and commands that hold braces:
// cloud-init renders the whole user-data as a jinja template, so braces
// meant for another tool would be rendered or refused, and cloud-init would
// then run none of it.
func checkJinja(files []SeedFile, pre, post []string) error {
	for _, f := range files {
		if m := jinjaRE.FindString(f.Content); m != "" {
			return fmt.Errorf("file %s: jinja would render %q", f.Path, m)
		}
	}
	for _, c := range append(slices.Clone(pre), post...) {
		if m := jinjaRE.FindString(c); m != "" {
			return fmt.Errorf("command %q: jinja would render %q", c, m)
		}
	}
	return nil
}

// renderUserData writes CABPK's cloud-config: the jinja header, the files
// and the placeholder as write_files, and runcmd: pre, the kubeadm command
// followed by the sentinel, post.
func renderUserData(files []SeedFile, pre []string, kubeadm string, post []string) (string, error) {
	// CABPK's own words: it makes /run/cluster-api in a way Windows
	// nodes understand too.
	files = append(files, SeedFile{Path: "/run/cluster-api/placeholder", Owner: "root:root", Permissions: "0640",
		Content: "This placeholder file is used to create the /run/cluster-api sub directory in a way that is compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with Windows)"})
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
	for _, c := range pre {
		fmt.Fprintf(&b, "  - %q\n", c)
	}
	fmt.Fprintf(&b, "  - '%s && echo success > %s'\n", kubeadm, kubeadmSentinel)
	for _, c := range post {
		fmt.Fprintf(&b, "  - %q\n", c)
	}
	return b.String(), nil
}

// nodeNameTemplate is how CABPK names the node: the datasource's
// local-hostname, rendered by cloud-init.
const nodeNameTemplate = "'{{ ds.meta_data.local_hostname }}'"

// nodeRegistration is the nodeRegistration both configurations carry: the
// containerd socket, images pulled only when absent (CABPK's default),
// the node named from the datasource, and kubelet's node-ip when set.
func nodeRegistration(nodeIP string) string {
	s := "nodeRegistration:\n  criSocket: unix:///run/containerd/containerd.sock\n  imagePullPolicy: IfNotPresent\n"
	if nodeIP != "" {
		s += "  kubeletExtraArgs:\n  - name: node-ip\n    value: " + nodeIP + "\n"
	}
	return s + "  name: " + nodeNameTemplate + "\n"
}

// clusterConfiguration is kubeadm v1beta4's ClusterConfiguration as CABPK
// marshals it for Kubernetes v1.31 (keys sorted, empty components as {}).
func (k KubeadmInit) clusterConfiguration() string {
	return `apiServer: {}
apiVersion: kubeadm.k8s.io/v1beta4
clusterName: ` + k.ClusterName + `
controlPlaneEndpoint: ` + k.ControlPlaneEndpoint + `
controllerManager:` + extraArgs(k.ControllerManagerArgs) + `
dns: {}
etcd: {}
imageRepository: ` + k.ImageRepository + `
kind: ClusterConfiguration
kubernetesVersion: ` + k.KubernetesVersion + `
networking:
  dnsDomain: cluster.local
  podSubnet: ` + k.PodSubnet + `
  serviceSubnet: ` + k.ServiceSubnet + `
scheduler:` + extraArgs(k.SchedulerArgs) + `
`
}

// extraArgs is a component's value in the ClusterConfiguration: v1beta4's
// list of extraArgs, sorted by name, or {} when there are none.
func extraArgs(args map[string]string) string {
	if len(args) == 0 {
		return " {}"
	}
	s := "\n  extraArgs:"
	for _, name := range slices.Sorted(maps.Keys(args)) {
		s += "\n  - name: " + name + "\n    value: " + strconv.Quote(args[name])
	}
	return s
}

// initConfiguration is the InitConfiguration: the bootstrap token and
// the API server's address when set, and nodeRegistration.
func (k KubeadmInit) initConfiguration() string {
	s := "apiVersion: kubeadm.k8s.io/v1beta4\n"
	if k.BootstrapToken != "" {
		s += "bootstrapTokens:\n- groups:\n  - system:bootstrappers:kubeadm:default-node-token\n  token: " + k.BootstrapToken +
			"\n  usages:\n  - signing\n  - authentication\n"
	}
	s += "kind: InitConfiguration\n"
	if k.AdvertiseAddress != "" {
		s += "localAPIEndpoint:\n  advertiseAddress: " + k.AdvertiseAddress + "\n"
	} else {
		s += "localAPIEndpoint: {}\n"
	}
	s += nodeRegistration(k.NodeIP)
	if k.ControlPlaneTimeout > 0 {
		s += "timeouts:\n  controlPlaneComponentHealthCheck: " + k.ControlPlaneTimeout.String() + "\n"
	}
	return s
}

// ClusterPKI is what Cluster API generates before the first machine
// (util/secret.NewCertificatesForInitialControlPlane): three certificate
// authorities and the service-account signing key, as seed files.
type ClusterPKI struct {
	files []SeedFile
	ca    *x509.Certificate
}

// NewClusterPKI makes new authorities and keys.
func NewClusterPKI() (*ClusterPKI, error) {
	p := &ClusterPKI{}
	for _, ca := range []struct{ base, cn string }{
		{"/etc/kubernetes/pki/ca", "kubernetes"},
		{"/etc/kubernetes/pki/etcd/ca", "etcd-ca"},
		{"/etc/kubernetes/pki/front-proxy-ca", "front-proxy-ca"},
	} {
		cert, key, err := selfSignedCA(ca.cn)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ca.cn, err)
		}
		if p.ca == nil {
			blk, _ := pem.Decode([]byte(cert))
			if p.ca, err = x509.ParseCertificate(blk.Bytes); err != nil {
				return nil, err
			}
		}
		p.files = append(p.files,
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
	p.files = append(p.files,
		SeedFile{Path: "/etc/kubernetes/pki/sa.pub", Owner: "root:root", Permissions: "0640",
			Content: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))},
		SeedFile{Path: "/etc/kubernetes/pki/sa.key", Owner: "root:root", Permissions: "0600",
			Content: string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)}))},
	)
	return p, nil
}

// CACertHash is the cluster CA's public key pin, as kubeadm join's
// discovery.bootstrapToken.caCertHashes takes it.
func (p *ClusterPKI) CACertHash() string {
	sum := sha256.Sum256(p.ca.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
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
