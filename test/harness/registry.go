package harness

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Registry is a real CNCF distribution registry (Debian's docker-registry)
// listening on 127.0.0.1, with its storage in a temporary directory and no
// auth. It stops when the test ends.
type Registry struct {
	// Addr is host:port, e.g. "127.0.0.1:41234"; go-containerregistry talks
	// plain HTTP to 127.0.0.1 by itself.
	Addr string
	// Storage is the registry's filesystem root, so a test can corrupt a blob.
	Storage string
	cmd     *exec.Cmd
	config  string
	// htpasswd, when set, is the bcrypt password file the registry asks
	// every client to log in against.
	htpasswd string
}

// StartRegistry starts a registry for the test.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	return startRegistry(t, "")
}

// StartRegistryWithAuth starts a registry that answers only user with
// password, through HTTP basic auth, as a registry behind a login does.
func StartRegistryWithAuth(t testing.TB, user, password string) *Registry {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return startRegistry(t, user+":"+string(hash)+"\n")
}

// startRegistry starts a registry, behind a login when htpasswd (the
// password file's content) is not empty.
func startRegistry(t testing.TB, htpasswd string) *Registry {
	t.Helper()
	bin := Tool(t, "docker-registry")
	dir := t.TempDir()
	r := &Registry{Storage: filepath.Join(dir, "storage"), config: filepath.Join(dir, "config.yml")}
	if htpasswd != "" {
		r.htpasswd = filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(r.htpasswd, []byte(htpasswd), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(r.Storage, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.start(bin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// BlobPath is where the registry keeps the blob with the given hex sha256.
func (r *Registry) BlobPath(hex string) string {
	return filepath.Join(r.Storage, "docker/registry/v2/blobs/sha256", hex[:2], hex, "data")
}

func (r *Registry) start(bin string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	r.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: %s}, delete: {enabled: true}}
http: {addr: %s}
`, r.Storage, r.Addr)
	if r.htpasswd != "" {
		cfg += fmt.Sprintf("auth: {htpasswd: {realm: stamp-test, path: %s}}\n", r.htpasswd)
	}
	if err := os.WriteFile(r.config, []byte(cfg), 0o644); err != nil {
		return err
	}
	r.cmd = exec.Command(bin, "serve", r.config)
	r.cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("starting docker-registry: %w", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + r.Addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || (r.htpasswd != "" && resp.StatusCode == http.StatusUnauthorized) {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.Stop()
	return fmt.Errorf("docker-registry on %s did not answer /v2/ within 15s", r.Addr)
}

// Stop ends the registry; its storage stays until the test's temp dir goes.
func (r *Registry) Stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		r.cmd = nil
	}
}

// Restart starts the registry again on a new port with the same storage.
func (r *Registry) Restart(t testing.TB) {
	t.Helper()
	r.Stop()
	if err := r.start(Tool(t, "docker-registry")); err != nil {
		t.Fatal(err)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
