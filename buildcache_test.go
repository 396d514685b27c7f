package stamp

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/layers/cache"
)

func TestCacheRefsAreCheckedBeforeTheBuild(t *testing.T) {
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{CacheFrom: "reg.invalid/cache:tag"}, {CacheTo: "Not A Ref"}} {
		_, err := o.openBuildCache(c)
		if !IsUsage(err) || !strings.Contains(err.Error(), "--cache-") {
			t.Errorf("%+v: %v", o, err)
		}
	}
	o := Options{CacheFrom: "reg.invalid/stamp-cache", CacheTo: "reg.invalid/stamp-cache", NoCache: true}
	bc, err := o.openBuildCache(c)
	if err != nil || bc.shared == nil || bc.read {
		t.Fatalf("%+v, %v", bc, err)
	}
}
