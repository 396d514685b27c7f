package recipes

import (
	"io/fs"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestParseSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"auto", 0, true},
		{"512", 512, true},
		{"512B", 512, true},
		{"256MiB", 256 << 20, true},
		{"256M", 256 << 20, true},
		{"4GiB", 4 << 30, true},
		{"1G", 1 << 30, true},
		{"1GB", 1e9, true},
		{"2 TiB", 2 << 40, true},
		{"1KB", 1000, true},
		{"0", 0, false},
		{"0MiB", 0, false},
		{"", 0, false},
		{"MiB", 0, false},
		{"-1G", 0, false},
		{"1.5G", 0, false},
		{"4gb", 0, false},
		{"9999999999T", 0, false},
		{"1048576TiB", 1 << 60, true},
		{"1048577TiB", 0, false},
		{"99999999999999999999", 0, false},
	} {
		got, err := ParseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Mode
		ok   bool
	}{
		{"0644", 0644, true},
		{"644", 0644, true},
		{"4755", 04755, true},
		{"07777", 07777, true},
		{"0o755", 0755, true},
		{"0", 0, true},
		{"10000", 0, false},
		{"0888", 0, false},
		{"", 0, false},
		{"rwx", 0, false},
		{"000000644", 0, false},
	} {
		got, err := ParseMode(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
	if s := Mode(0755).String(); s != "0755" {
		t.Errorf("String = %q", s)
	}
	if fm := Mode(04755).FileMode(); fm != fs.ModeSetuid|0755 {
		t.Errorf("FileMode(04755) = %v", fm)
	}
	if fm := Mode(03777).FileMode(); fm != fs.ModeSetgid|fs.ModeSticky|0777 {
		t.Errorf("FileMode(03777) = %v", fm)
	}
}

// Mode refuses an unquoted octal even through plain yaml.Unmarshal.
func TestModeUnmarshalYAML(t *testing.T) {
	var v struct{ Mode Mode }
	if err := yaml.Unmarshal([]byte(`mode: "0600"`), &v); err != nil || v.Mode != 0600 {
		t.Errorf("quoted: %v, %v", v.Mode, err)
	}
	if err := yaml.Unmarshal([]byte(`mode: 0600`), &v); err == nil {
		t.Errorf("unquoted 0600 accepted as %v", v.Mode)
	}
}

func TestParseOwner(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Owner
		ok   bool
	}{
		{"0:0", Owner{"0", "0"}, true},
		{"root:root", Owner{"root", "root"}, true},
		{"1000:capi", Owner{"1000", "capi"}, true},
		{"root", Owner{"root", "root"}, true},
		{"_apt:nogroup", Owner{"_apt", "nogroup"}, true},
		{"", Owner{}, false},
		{":0", Owner{}, false},
		{"0:", Owner{}, false},
		{"a:b:c", Owner{}, false},
		{"4294967296:0", Owner{}, false},
		{"Root Man", Owner{}, false},
		{"-x", Owner{}, false},
	} {
		got, err := ParseOwner(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseOwner(%q) = %v, %v; want %v, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
	if !(Owner{}).IsZero() || (Owner{"0", "0"}).IsZero() {
		t.Error("IsZero is wrong")
	}
}

func TestNormalizeSHA256(t *testing.T) {
	for _, tt := range []struct {
		in string
		ok bool
	}{
		{hex64, true},
		{"sha256:" + hex64, true},
		{hex64[:63], false},
		{hex64 + "0", false},
		{"sha256:" + hex64[:10], false},
		{"md5:" + hex64, false},
		{"sha256:sha256:" + hex64, false},
		{"0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef", false},
		{"g123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", false},
	} {
		got, err := NormalizeSHA256(tt.in)
		if (err == nil) != tt.ok || tt.ok && got != hex64 {
			t.Errorf("NormalizeSHA256(%q) = %q, %v; want ok=%v", tt.in, got, err, tt.ok)
		}
	}
}

func TestCheckRef(t *testing.T) {
	for _, tt := range []struct {
		ref       string
		loose, ok bool // loose: accepted without a tag; ok: accepted as an images entry
	}{
		{"registry.example.invalid/pause:3.10@sha256:" + hex64, true, true},
		{"127.0.0.1:5000/k8s/bins:v1.31.4", true, true},
		{"127.0.0.1:5000/k8s/bins@sha256:" + hex64, true, false},
		{"127.0.0.1:5000/k8s/bins", true, false},
		{"a/b:1@sha256:" + hex64[:10], false, false},
		{"a/b:1@md5:" + hex64, false, false},
		{"a/b:-bad@sha256:" + hex64, false, false},
		{"a/b:1@x@sha256:" + hex64, false, false},
		{"", false, false},
		{":1", false, false},
		{"a b:1", false, false},
	} {
		if err := checkRef(tt.ref, false); (err == nil) != tt.loose {
			t.Errorf("checkRef(%q, false) = %v, want ok=%v", tt.ref, err, tt.loose)
		}
		if err := checkRef(tt.ref, true); (err == nil) != tt.ok {
			t.Errorf("checkRef(%q, true) = %v, want ok=%v", tt.ref, err, tt.ok)
		}
	}
}
