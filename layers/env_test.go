package layers

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// baseEnv is what a layer sees in a build: a tree under parent ("" for a
// fresh temporary directory) holding each tarball in turn, applied as the
// base phase would, a cache and a silent log; label names the step.
func baseEnv(t *testing.T, parent, label string, tarballs ...string) *Env {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	c, err := cache.Open(t.TempDir(), cache.Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if parent == "" {
		parent = t.TempDir()
	}
	ep := time.Unix(1700000000, 0).UTC()
	env := &Env{Tree: rootfstest.NewIn(t, parent, ep), Cache: c, Log: log, Epoch: ep, Arch: "amd64", Label: label}
	for _, tb := range tarballs {
		d, err := c.Import(context.Background(), tb)
		if err != nil {
			t.Fatal(err)
		}
		if err := (&Tarball{Input: Input{Kind: "tarball", URI: tb, Digest: d}}).Apply(context.Background(), env); err != nil {
			t.Fatalf("%s: %v", tb, err)
		}
	}
	return env
}
