package harness

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestRegistryServesV2(t *testing.T) {
	r := StartRegistry(t)
	resp, err := http.Get("http://" + r.Addr + "/v2/_catalog")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "repositories") {
		t.Fatalf("catalog: %d %s", resp.StatusCode, b)
	}
	r.Stop()
	if _, err := http.Get("http://" + r.Addr + "/v2/"); err == nil {
		t.Fatal("registry still answers after Stop")
	}
}
