package scripts

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
)

// POSIX ACLs as the kernel stores them in the system.posix_acl_access and
// system.posix_acl_default xattrs (version 2, entries of tag, perm, id),
// for systemd-tmpfiles' a and a+ lines.
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
	aclNoID     = 0xffffffff

	xattrACLAccess  = "system.posix_acl_access"
	xattrACLDefault = "system.posix_acl_default"
)

type aclEntry struct {
	tag  uint16
	perm uint16
	id   uint32
}

func decodeACL(b string) []aclEntry {
	if len(b) < 4 || binary.LittleEndian.Uint32([]byte(b[:4])) != 2 {
		return nil
	}
	var out []aclEntry
	for i := 4; i+8 <= len(b); i += 8 {
		e := []byte(b[i : i+8])
		out = append(out, aclEntry{binary.LittleEndian.Uint16(e), binary.LittleEndian.Uint16(e[2:]), binary.LittleEndian.Uint32(e[4:])})
	}
	return out
}

func encodeACL(es []aclEntry) string {
	sort.Slice(es, func(i, j int) bool {
		if es[i].tag != es[j].tag {
			return es[i].tag < es[j].tag
		}
		return es[i].id < es[j].id
	})
	b := make([]byte, 4, 4+8*len(es))
	binary.LittleEndian.PutUint32(b, 2)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return string(b)
}

// aclFromMode is the minimal ACL a mode stands for.
func aclFromMode(perm uint32) []aclEntry {
	return []aclEntry{{aclUserObj, uint16(perm >> 6 & 7), aclNoID}, {aclGroupObj, uint16(perm >> 3 & 7), aclNoID}, {aclOther, uint16(perm & 7), aclNoID}}
}

func aclPerm(s string) (uint16, bool) {
	var p uint16
	for _, c := range s {
		switch c {
		case 'r':
			p |= 4
		case 'w':
			p |= 2
		case 'x', 'X':
			p |= 1
		case '-':
		default:
			return 0, false
		}
	}
	return p, true
}

// applyACL is systemd-tmpfiles' a (replace) or a+ (append) line on an
// entry: the access and default ("d:") entries merged into what the file
// has, base entries taken from the mode where missing, the mask computed,
// and the mode's group bits set from it, as setting an access ACL does.
func (r *run) applyACL(e *rootfs.Entry, spec string, appendTo bool) error {
	var access, dflt []aclEntry
	if appendTo {
		access = decodeACL(e.Xattrs[xattrACLAccess])
		dflt = decodeACL(e.Xattrs[xattrACLDefault])
	}
	var haveAccess, haveDefault bool
	for _, item := range strings.Split(spec, ",") {
		ent, isDefault, err := r.parseACLEntry(strings.TrimSpace(item))
		if err != nil {
			return err
		}
		list := &access
		if isDefault {
			list, haveDefault = &dflt, true
			if e.Type != rootfs.TypeDir {
				continue
			}
		} else {
			haveAccess = true
		}
		*list = setACLEntry(*list, ent)
	}
	return r.env.Tree.Update(e.Path, func(in *rootfs.Inode) {
		if in.Xattrs == nil {
			in.Xattrs = map[string]string{}
		}
		if haveAccess {
			es := completeACL(access, e.Perm)
			in.Xattrs[xattrACLAccess] = encodeACL(es)
			in.Perm = aclModeBits(es, in.Perm)
		}
		if haveDefault && in.Type == rootfs.TypeDir {
			in.Xattrs[xattrACLDefault] = encodeACL(completeACL(dflt, e.Perm))
		}
	})
}

// parseACLEntry reads one entry of an ACL spec (u:name:rwx, d:g::r-x...),
// and whether it is a default entry.
func (r *run) parseACLEntry(item string) (aclEntry, bool, error) {
	isDefault := false
	if rest, ok := strings.CutPrefix(item, "d:"); ok {
		item, isDefault = rest, true
	} else if rest, ok := strings.CutPrefix(item, "default:"); ok {
		item, isDefault = rest, true
	}
	f := strings.Split(item, ":")
	if len(f) != 3 {
		return aclEntry{}, false, fmt.Errorf("ACL entry %q", item)
	}
	perm, ok := aclPerm(f[2])
	if !ok {
		return aclEntry{}, false, fmt.Errorf("ACL entry %q", item)
	}
	ent := aclEntry{perm: perm, id: aclNoID}
	switch f[0] {
	case "u", "user":
		ent.tag = aclUserObj
		if f[1] != "" {
			id, ok := r.accountID("/etc/passwd", f[1])
			if !ok {
				return aclEntry{}, false, fmt.Errorf("ACL entry %q: no such user", item)
			}
			ent.tag, ent.id = aclUser, id
		}
	case "g", "group":
		ent.tag = aclGroupObj
		if f[1] != "" {
			id, ok := r.accountID("/etc/group", f[1])
			if !ok {
				return aclEntry{}, false, fmt.Errorf("ACL entry %q: no such group", item)
			}
			ent.tag, ent.id = aclGroup, id
		}
	case "m", "mask":
		ent.tag = aclMask
	case "o", "other":
		ent.tag = aclOther
	default:
		return aclEntry{}, false, fmt.Errorf("ACL entry %q", item)
	}
	return ent, isDefault, nil
}

// setACLEntry replaces the entry of list with ent's tag and id, or adds
// ent.
func setACLEntry(list []aclEntry, ent aclEntry) []aclEntry {
	replaced := false
	for i := range list {
		if list[i].tag == ent.tag && list[i].id == ent.id {
			list[i] = ent
			replaced = true
		}
	}
	if !replaced {
		list = append(list, ent)
	}
	return list
}

// completeACL adds the owner, group and other entries es lacks (from the
// file's mode perm) and works the mask out again, as setfacl does.
func completeACL(es []aclEntry, perm uint32) []aclEntry {
	for _, b := range aclFromMode(perm) {
		found := false
		for _, x := range es {
			found = found || x.tag == b.tag
		}
		if !found {
			es = append(es, b)
		}
	}
	var mask uint16
	named := false
	out := es[:0]
	for _, x := range es {
		if x.tag == aclMask {
			continue
		}
		if x.tag == aclGroupObj || x.tag == aclUser || x.tag == aclGroup {
			mask |= x.perm
		}
		named = named || x.tag == aclUser || x.tag == aclGroup
		out = append(out, x)
	}
	if named {
		out = append(out, aclEntry{aclMask, mask, aclNoID})
	}
	return out
}

// aclModeBits is perm with its rwx bits as the access ACL es says (the
// group bits are the mask's when there is one).
func aclModeBits(es []aclEntry, perm uint32) uint32 {
	for _, x := range es {
		switch x.tag {
		case aclUserObj:
			perm = perm&^0o700 | uint32(x.perm)<<6
		case aclOther:
			perm = perm&^0o007 | uint32(x.perm)
		case aclMask:
			perm = perm&^0o070 | uint32(x.perm)<<3
		case aclGroupObj:
			if !hasTag(es, aclMask) {
				perm = perm&^0o070 | uint32(x.perm)<<3
			}
		}
	}
	return perm
}

func hasTag(es []aclEntry, tag uint16) bool {
	for _, e := range es {
		if e.tag == tag {
			return true
		}
	}
	return false
}
