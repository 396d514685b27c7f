package recipes

import (
	"reflect"
	"strings"
	"testing"
)

func TestRunLayer(t *testing.T) {
	r, err := Parse([]byte(head+`provision:
  layers:
    - run: {command: [/bin/sh, -c, "echo hi > /etc/hi"], env: {B: "2", A: "1"}}
    - run:
        command: [update-ca-certificates]
        network: true
`), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ls := r.Provision.Layers
	want := []Run{
		{Command: []string{"/bin/sh", "-c", "echo hi > /etc/hi"}, Env: map[string]string{"A": "1", "B": "2"}},
		{Command: []string{"update-ca-certificates"}, Network: true},
	}
	for i, w := range want {
		if ls[i].Kind() != "run" || !reflect.DeepEqual(*ls[i].Run, w) {
			t.Errorf("layer %d: kind %q, %+v, want %+v", i, ls[i].Kind(), ls[i].Run, w)
		}
	}
	if r.OfflineOnly {
		t.Error("offline-only defaults to true")
	}
}

func TestRunAndOfflineOnlyErrors(t *testing.T) {
	const chroot = "    - debs:\n        repo: \"file:///srv\"\n        suite: s\n        packages: [socat]\n        scripts: chroot\n"
	tests := []struct {
		name, yaml  string
		line        int
		field, want string
	}{
		{"no command", head + "provision:\n  layers:\n    - run: {env: {A: b}}\n", 7, "provision.layers[0].run.command", "command is required"},
		{"command string", head + "provision:\n  layers:\n    - run: {command: \"echo hi\"}\n", 7, "provision.layers[0].run.command", "command is a list"},
		{"empty command", head + "provision:\n  layers:\n    - run: {command: []}\n", 7, "provision.layers[0].run.command", "must name a program"},
		{"empty program", head + "provision:\n  layers:\n    - run: {command: [\"\", x]}\n", 7, "provision.layers[0].run.command", "must not be empty"},
		{"env name", head + "provision:\n  layers:\n    - run: {command: [x], env: {A-B: c}}\n", 7, "provision.layers[0].run.env.A-B", "environment variable"},
		{"network string", head + "provision:\n  layers:\n    - run: {command: [x], network: \"yes\"}\n", 7, "provision.layers[0].run.network", "expected true or false"},
		{"unknown field", head + "provision:\n  layers:\n    - run: {command: [x], user: root}\n", 7, "provision.layers[0].run.user", "unknown field"},
		{"offline-only string", head + "offline-only: \"yes\"\n", 5, "offline-only", "expected true or false"},
		{"release relative", head + "release: etc/stamp-release\n", 5, "release", "must be absolute"},
		{"release dotdot", head + "release: /etc/../x\n", 5, "release", "must not contain .."},
		{"offline-only run", head + "offline-only: true\ncustomize:\n  layers:\n    - files: [{path: /a, content: x}]\n    - run: {command: [/bin/true]}\n", 9, "customize.layers[1].run", "offline-only: true forbids run steps"},
		{"offline-only after run", head + "provision:\n  layers:\n    - run: {command: [/bin/true]}\noffline-only: true\n", 7, "provision.layers[0].run", "offline-only: true forbids run steps"},
		{"offline-only chroot", head + "offline-only: true\nprovision:\n  layers:\n" + chroot, 8, "provision.layers[0].debs.scripts", "forbids scripts: chroot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), "r.yaml")
			if err == nil {
				t.Fatal("no error")
			}
			es := unjoin(err)
			if len(es) != 1 {
				t.Fatalf("got %d errors, want 1: %v", len(es), err)
			}
			e := es[0]
			if e.Line != tt.line || e.Field != tt.field || !strings.Contains(e.Msg, tt.want) || e.File != "r.yaml" {
				t.Errorf("got %s:%d: %s: %s, want line %d field %s msg ~%q", e.File, e.Line, e.Field, e.Msg, tt.line, tt.field, tt.want)
			}
		})
	}
	// offline-only leaves offline scripts and hooks alone.
	if _, err := Parse([]byte(head+"offline-only: true\nprovision:\n  layers:\n"+strings.Replace(chroot, "chroot", "offline", 1)+"    - hook: ./h.sh\n"), "r.yaml"); err != nil {
		t.Errorf("offline-only refused an offline recipe: %v", err)
	}
}
