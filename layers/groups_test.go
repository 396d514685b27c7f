package layers

import (
	"context"
	"strings"
	"testing"
)

func TestGroupsMembersAndIDs(t *testing.T) {
	env := acctTestEnv(t)
	debianAccounts(t, env)
	layer := &Groups{Groups: []Group{
		{Name: "docker", Members: []string{"cloudsdk", "postgres"}},
		{Name: "kube", GID: acctU32(2000)},
		{Name: "sysg", System: true},
		{Name: "ssl-cert", Members: []string{"cloudsdk", "postgres"}}, // existing: members appended once
		{Name: "next"},
	}}
	acctApply(t, env, layer)
	if got, want := acctReadFile(t, env, groupPath), strings.Replace(fixGroup, "ssl-cert:x:103:postgres\n", "ssl-cert:x:103:postgres,cloudsdk\n", 1)+
		"docker:x:1001:cloudsdk,postgres\nkube:x:2000:\nsysg:x:995:\nnext:x:2001:\n"; got != want {
		t.Errorf("group:\n--- got\n%s--- want\n%s", got, want)
	}
	if got, want := acctReadFile(t, env, gshadowPath), strings.Replace(fixGshadow, "ssl-cert:!::postgres\n", "ssl-cert:!::postgres,cloudsdk\n", 1)+
		"docker:!::cloudsdk,postgres\nkube:!::\nsysg:!::\nnext:!::\n"; got != want {
		t.Errorf("gshadow:\n--- got\n%s--- want\n%s", got, want)
	}
	if got := acctReadFile(t, env, passwdPath); got != fixPasswd {
		t.Errorf("passwd changed:\n%s", got)
	}
	before := acctSnapshot(env)
	acctApply(t, env, layer)
	if after := acctSnapshot(env); after != before {
		t.Errorf("second apply changed the tree")
	}
}

func TestGroupsConflicts(t *testing.T) {
	for _, c := range []struct {
		name  string
		group Group
		want  string
	}{
		{"gid differs", Group{Name: "sudo", GID: acctU32(28)}, `group "sudo": exists with gid 27, not 28`},
		{"gid taken", Group{Name: "new", GID: acctU32(27)}, `group "new": gid 27 is taken by group "sudo"`},
		{"unknown member", Group{Name: "new", Members: []string{"nosuch"}}, `member "nosuch": no such user`},
		{"bad name", Group{Name: "-x"}, `invalid name "-x"`},
		{"numeric name", Group{Name: "123"}, `purely numeric`},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := acctTestEnv(t)
			debianAccounts(t, env)
			before := acctSnapshot(env)
			err := (&Groups{Groups: []Group{c.group}}).Apply(context.Background(), env)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), env.Label+": ") {
				t.Fatalf("error %v, want one starting with the label and containing %q", err, c.want)
			}
			if after := acctSnapshot(env); after != before {
				t.Error("a failed layer changed the tree")
			}
		})
	}
}
