package kmod

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"
)

// FuzzModule feeds Depmod a module of any bytes beside a well-formed one:
// it must never panic, and whatever the bytes, the well-formed module is
// listed and every index is made.
func FuzzModule(f *testing.F) {
	f.Add(testModule{modinfo: []string{"alias=x"}, exports: []string{"s"}, needs: []string{"t"}, versions: []string{"t"}}.bytes())
	f.Add(testModule{elf32: true, msb: true, crcs: true, exports: []string{"a", "b"}}.bytes())
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Add(append([]byte{0x28, 0xb5, 0x2f, 0xfd}, make([]byte, 32)...))
	f.Add(append([]byte{0xfd, '7', 'z', 'X', 'Z', 0}, make([]byte, 32)...))
	good := testModule{exports: []string{"t"}, modinfo: []string{"alias=devname:g", "alias=char-major-1-2"}}.bytes()
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := "lib/modules/" + testVersion + "/"
		fsys := fstest.MapFS{
			dir + "kernel/fuzz.ko":          {Data: b},
			dir + "kernel/good.ko":          {Data: good},
			dir + "modules.order":           {Data: []byte("kernel/good.ko\nkernel/fuzz.ko\n")},
			dir + "modules.builtin":         {Data: b},
			dir + "modules.builtin.modinfo": {Data: b},
		}
		idx, err := Depmod(context.Background(), fsys, testVersion, Options{MaxModuleSize: 1 << 20})
		if err != nil {
			// A cycle (fuzz.ko needing its own symbol) or a byte kmod's
			// tries cannot hold are the failures there are.
			return
		}
		if len(idx) != len(indexNames) {
			t.Fatalf("%d indexes", len(idx))
		}
		for _, ix := range idx {
			if ix.Name == "modules.dep" && !strings.HasPrefix(string(ix.Data), "kernel/good.ko:") {
				t.Fatalf("modules.dep lost good.ko:\n%s", ix.Data)
			}
		}
	})
}
