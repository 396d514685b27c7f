package accountdb

import (
	"slices"
	"testing"
)

func TestFields(t *testing.T) {
	for _, c := range []struct {
		line string
		want []string
	}{
		{"root:x:0:0:root:/root:/bin/bash", []string{"root", "x", "0", "0", "root", "/root", "/bin/bash"}},
		{"sudo:x:27:alice,bob", []string{"sudo", "x", "27", "alice,bob"}},
		{"empty::", []string{"empty", "", ""}},
		{"", nil},
		{"# a comment:x:0:", nil},
		{"+:::", nil},
		{"-nisuser:::", nil},
		{"no colon here", nil},
	} {
		if got := Fields(c.line); !slices.Equal(got, c.want) {
			t.Errorf("Fields(%q) = %q, want %q", c.line, got, c.want)
		}
	}
}
