package hostroot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"
)

// backup copies the file at p into backupDir under its sha256, checking the
// digest while it copies: a file changed since the scan is not saved as
// something it is not.
func (d *dirTree) backup(p, digest string, ep time.Time) error {
	name := backupPath(digest)
	if _, err := d.lstat(name); err == nil {
		return nil
	}
	// A second name keeps the old content at the cost of a link: apply
	// replaces by rename and removes by unlink, so it never writes into
	// the inode itself.
	err := d.at(p, func(fd int, n string) error {
		return d.at(name, func(bfd int, bn string) error {
			unix.Unlinkat(bfd, tmpName, 0)
			if err := unix.Linkat(fd, n, bfd, tmpName, 0); err != nil {
				return err
			}
			got, _, err := hashFile(bfd, tmpName)
			if err == nil && got != digest {
				err = fmt.Errorf("changed while apply ran (sha256 %s, scanned as %s)", got, digest)
			}
			if err == nil {
				err = unix.Renameat(bfd, tmpName, bfd, bn)
			}
			if err != nil {
				unix.Unlinkat(bfd, tmpName, 0)
			}
			return err
		})
	})
	if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EMLINK) {
		return err
	}
	return d.at(p, func(fd int, n string) error {
		src, _, err := openRegular(fd, n)
		if err != nil {
			return err
		}
		defer src.Close()
		return d.writeStream(name, 0o600, ep, func(w io.Writer) error {
			h := sha256.New()
			if _, err := io.Copy(io.MultiWriter(w, h), src); err != nil {
				return err
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != digest {
				return fmt.Errorf("changed while apply ran (sha256 %s, scanned as %s)", got, digest)
			}
			return nil
		})
	})
}

// checkContent says how the regular file name in the directory fd differs
// from the content apply recorded: its type, its size or its sha256.
func checkContent(fd int, name, digest string, size int64) error {
	got, n, err := hashFile(fd, name)
	switch {
	case err != nil:
		return err
	case n != size:
		return fmt.Errorf("size %d, recorded %d", n, size)
	case got != digest:
		return fmt.Errorf("sha256 %s, recorded %s", got, digest)
	}
	return nil
}

// checkBackup says how the backup of the content e recorded differs from
// it, nil when it does not: it must be a regular file reached through
// directories alone, with the recorded size and sha256.
func (d *dirTree) checkBackup(e *Entry) error {
	return d.at(backupPath(e.Digest), func(fd int, name string) error {
		return checkContent(fd, name, e.Digest, e.Size)
	})
}

// restoreContent puts the content of e's backup under name in the
// directory fd (the caller checks it). take lets it give the backup's own
// inode rather than a copy, when nothing else shares that inode: a backup
// with another name, anywhere, is copied, so whoever holds that name cannot
// write to the restored file.
func (d *dirTree) restoreContent(e *Entry, take bool, fd int, name string) error {
	return d.at(backupPath(e.Digest), func(bfd int, bname string) error {
		if take {
			var st unix.Stat_t
			err := unix.Fstatat(bfd, bname, &st, unix.AT_SYMLINK_NOFOLLOW)
			if err == nil && st.Nlink == 1 {
				err = unix.Linkat(bfd, bname, fd, name, 0)
				if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EMLINK) {
					return err
				}
			} else if err != nil {
				return err
			}
		}
		return copyFileAt(fd, name, bfd, bname)
	})
}
