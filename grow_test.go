package stamp

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

func TestGrowDropInOnlyForGrowingRawDisks(t *testing.T) {
	no := false
	cases := []struct {
		outputs []recipes.Output
		want    bool
	}{
		{[]recipes.Output{{Format: "tar"}}, false},
		{[]recipes.Output{{Format: "tar"}, {Format: "raw"}}, true},
		{[]recipes.Output{{Format: "raw", Grow: &no}}, false},
	}
	for i, c := range cases {
		tree, err := rootfs.New(filepath.Join(t.TempDir(), "tree"), rootfs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rec := &recipes.Recipe{Outputs: c.outputs}
		if err := addGrowDropIn(tree, rec, time.Unix(1700000000, 0)); err != nil {
			t.Fatal(err)
		}
		e := tree.Get(GrowDropIn)
		if (e != nil) != c.want {
			t.Errorf("case %d: drop-in present = %v, want %v", i, e != nil, c.want)
		}
		if e != nil && (e.Perm != 0o644 || e.UID != 0 || e.Origin.Layer != "stamp") {
			t.Errorf("case %d: drop-in entry %+v", i, e.Inode)
		}
		tree.Close()
	}
}
