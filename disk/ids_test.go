package disk

import (
	"testing"
)

func TestUUIDStable(t *testing.T) {
	// Pinned: a change here changes the identifiers of every image ever built.
	// The values agree with Python's uuid.uuid5(namespace, seed+"\0"+name).
	for _, c := range []struct {
		got  [16]byte
		want string
	}{
		{UUID("k8s-node", "gpt-disk"), "6b17d700-fc34-555e-97e1-c11e057b6436"},
		{DiskGUID("k8s-node"), "6b17d700-fc34-555e-97e1-c11e057b6436"},
		{PartitionGUID("k8s-node", "root"), "3e2ac3ca-233b-5b25-bb35-5a7ee117aaf9"},
	} {
		if s := FormatUUID(c.got); s != c.want {
			t.Errorf("got %s, pinned %s", s, c.want)
		}
	}
	if first, again := UUID("a", "b"), UUID("a", "b"); first != again {
		t.Fatal("UUID is not a function of its inputs")
	}
}

func TestUUIDVersionAndVariant(t *testing.T) {
	for _, n := range []string{"", "x", "gpt-partition/root"} {
		u := UUID("seed", n)
		if u[6]>>4 != 5 {
			t.Errorf("%q: version %d, want 5", n, u[6]>>4)
		}
		if u[8]>>6 != 2 {
			t.Errorf("%q: variant bits %b, want 10", n, u[8]>>6)
		}
	}
}

func TestUUIDDistinct(t *testing.T) {
	ids := []([16]byte){
		DiskGUID("n"), PartitionGUID("n", "esp"), PartitionGUID("n", "root"),
		FilesystemUUID("n", "root"), HashSeed("n", "root"), FilesystemUUID("m", "root"),
		VHDUniqueID("n", "vhd"), VHDUniqueID("n", "root"), VMDKID("n", "vhd"), VMDKID("n", "root"),
		UUID("ab", "c"), UUID("a", "bc"),
	}
	seen := map[[16]byte]int{}
	for i, u := range ids {
		if j, dup := seen[u]; dup {
			t.Errorf("ids %d and %d are equal: %s", j, i, FormatUUID(u))
		}
		seen[u] = i
	}
	if VolumeID("n", "esp") == VolumeID("n", "root") {
		t.Error("volume IDs of two partitions are equal")
	}
}

func TestGUIDBytes(t *testing.T) {
	u := [16]byte{0xC1, 0x2A, 0x73, 0x28, 0xF8, 0x1F, 0x11, 0xD2, 0xBA, 0x4B, 0x00, 0xA0, 0xC9, 0x3E, 0xC9, 0x3B}
	if FormatUUID(u) != "c12a7328-f81f-11d2-ba4b-00a0c93ec93b" {
		t.Fatalf("FormatUUID: %s", FormatUUID(u))
	}
	// The ESP type GUID as it sits in a GPT entry (UEFI spec, table 5.x).
	want := [16]byte{0x28, 0x73, 0x2A, 0xC1, 0x1F, 0xF8, 0xD2, 0x11, 0xBA, 0x4B, 0x00, 0xA0, 0xC9, 0x3E, 0xC9, 0x3B}
	if GUIDBytes(u) != want {
		t.Fatalf("GUIDBytes: % x, want % x", GUIDBytes(u), want)
	}
}
