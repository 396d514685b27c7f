package layers

import (
	"fmt"
	"strconv"

	"github.com/stamp-dev/stamp/rootfs"
)

// Owner names a file's owner as the recipe gave it: numbers, or names that
// are looked up in the tree's own /etc/passwd and /etc/group when the layer
// applies (an earlier layer may have created them). Empty means 0:0.
type Owner struct {
	User, Group string
}

// ResolveOwner turns an Owner into numeric ids using the tree's account files.
func ResolveOwner(t *rootfs.Tree, o Owner) (uid, gid uint32, err error) {
	if o.User == "" && o.Group == "" {
		return 0, 0, nil
	}
	var userGID uint32
	var haveUserGID bool
	if o.User != "" {
		if n, err := strconv.ParseUint(o.User, 10, 32); err == nil {
			uid = uint32(n)
		} else {
			rec, err := lookupAccount(t, passwdPath, o.User)
			if err != nil {
				return 0, 0, err
			}
			if len(rec) < 4 {
				return 0, 0, fmt.Errorf("user %q is not in the tree's %s", o.User, passwdPath)
			}
			u, err1 := strconv.ParseUint(rec[2], 10, 32)
			g, err2 := strconv.ParseUint(rec[3], 10, 32)
			if err1 != nil || err2 != nil {
				return 0, 0, fmt.Errorf("user %q has a malformed line in %s", o.User, passwdPath)
			}
			uid, userGID, haveUserGID = uint32(u), uint32(g), true
		}
	}
	switch {
	case o.Group == "" && haveUserGID:
		gid = userGID
	case o.Group == "":
		gid = uid
	default:
		if n, err := strconv.ParseUint(o.Group, 10, 32); err == nil {
			gid = uint32(n)
			break
		}
		rec, err := lookupAccount(t, groupPath, o.Group)
		if err != nil {
			return 0, 0, err
		}
		if len(rec) < 3 {
			return 0, 0, fmt.Errorf("group %q is not in the tree's %s", o.Group, groupPath)
		}
		g, err := strconv.ParseUint(rec[2], 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("group %q has a malformed line in %s", o.Group, groupPath)
		}
		gid = uint32(g)
	}
	return uid, gid, nil
}

func lookupAccount(t *rootfs.Tree, db, name string) ([]string, error) {
	d, err := loadDB(t, db)
	if err != nil {
		return nil, err
	}
	_, rec := d.find(name)
	return rec, nil
}
