package stamp

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/formats/attest"
)

func TestDebsFromStatus(t *testing.T) {
	status := "Package: b\nStatus: install ok installed\nArchitecture: all\nVersion: 2\nDescription: x\n more\n .\n\n" +
		"Package: a\nStatus: install ok installed\nArchitecture: amd64\nSource: asrc (1)\nVersion: 1:1.0-1\n\n" +
		"Package: c\nStatus: deinstall ok config-files\nVersion: 3\n"
	got, err := debsFromStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	want := []attest.Deb{{Name: "a", Version: "1:1.0-1", Arch: "amd64", Source: "asrc"}, {Name: "b", Version: "2", Arch: "all"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := debsFromStatus(strings.NewReader("no colon here\n")); err == nil {
		t.Error("a line that is not a field is accepted")
	}
}
