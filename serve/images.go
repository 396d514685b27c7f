package serve

import (
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

// checksumSuffix asks for one file's checksum line, "SHA256  NAME": the
// URL form a Metal3 BareMetalHost's image.checksum takes (with
// checksumType sha256).
const checksumSuffix = ".sha256sum"

// ipxeScript is the live output's iPXE script (formats.PXEScript).
const ipxeScript = "boot.ipxe"

// touchEvery is how often a served build tells the cache it is still used:
// a prune keeps what was used within its --keep-for.
const touchEvery = time.Minute

// getImage serves a file of a finished build straight from the cache's
// blob: the name is looked up among the files the build's record names,
// never joined to a directory, so no name leads anywhere else. The file
// goes out by sendfile, with Range, an ETag of its sha256 and If-None-Match.
func (s *Server) getImage(w http.ResponseWriter, r *http.Request) {
	b := s.buildOf(w, r)
	if b == nil {
		return
	}
	name := r.PathValue("name")
	if !fs.ValidPath(name) || name == "." {
		writeError(w, r, failf(http.StatusBadRequest, "", "%q is not the name of a file of a build", trim(name, 128)))
		return
	}
	switch b.state() {
	case stateDone:
	case statePruned:
		writeError(w, r, failf(http.StatusGone, "", "build %s's files are no longer in the cache; POST it again", b.id))
		return
	case stateFailed:
		writeError(w, r, failf(http.StatusNotFound, "", "build %s failed; it has no files", b.id))
		return
	default:
		writeError(w, r, failf(http.StatusConflict, "", "build %s is not done yet; its files are served once it is", b.id))
		return
	}
	f, ok := b.file(name)
	if !ok {
		s.aliases(w, r, b, name)
		return
	}
	s.serveFile(w, r, b, f)
}

// aliases answers the names that stand for a file of the build: the
// checksum of one, and boot.ipxe for the one iPXE script inside an output.
func (s *Server) aliases(w http.ResponseWriter, r *http.Request, b *build, name string) {
	if base, ok := strings.CutSuffix(name, checksumSuffix); ok {
		if f, ok := b.file(base); ok {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("ETag", `"`+f.SHA256+`.sum"`)
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
			writeBody(w, r, f.SHA256+"  "+path.Base(base)+"\n")
			return
		}
	}
	if name == ipxeScript {
		var found []string
		for _, n := range b.names() {
			if path.Base(n) == ipxeScript {
				found = append(found, n)
			}
		}
		if len(found) == 1 {
			// A redirect, so that iPXE resolves the script's relative
			// names (the kernel and initramfs beside it) against where it
			// really is.
			http.Redirect(w, r, "/v1/images/"+b.id+"/"+found[0], http.StatusTemporaryRedirect)
			return
		}
		if len(found) > 1 {
			writeError(w, r, failf(http.StatusNotFound, "", "build %s has %d iPXE scripts (%s); ask for one by its name", b.id, len(found), strings.Join(found, ", ")))
			return
		}
		writeError(w, r, failf(http.StatusNotFound, "", "build %s has no live output, so no %s", b.id, ipxeScript))
		return
	}
	writeError(w, r, failf(http.StatusNotFound, "", "build %s has no file %q; GET /v1/builds/%s lists them", b.id, trim(name, 128), b.id))
}

func writeBody(w http.ResponseWriter, r *http.Request, body string) {
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	io.WriteString(w, body)
}

// serveFile sends one file of the build from its blob in the cache.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, b *build, f OutputFile) {
	b.mu.Lock()
	touch := time.Since(b.touched) > touchEvery
	b.mu.Unlock()
	if touch && !s.stillServed(b) {
		writeError(w, r, failf(http.StatusGone, "", "build %s's files are no longer in the cache; POST it again", b.id))
		return
	}
	blob, err := s.reader.OpenFile("sha256:" + f.SHA256)
	if err != nil {
		s.pruned(b, err)
		writeError(w, r, failf(http.StatusGone, "", "build %s's file %s is no longer in the cache; POST the build again", b.id, f.Name))
		return
	}
	defer blob.Close()
	h := w.Header()
	h.Set("ETag", `"`+f.SHA256+`"`)
	h.Set("Content-Type", contentType(f.Name))
	h.Set("X-Content-Type-Options", "nosniff")
	// A build's files never change: the same ID is the same bytes.
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	http.NewResponseController(w).SetWriteDeadline(downloadDeadline(f.Size))
	// No modification time: the ETag is the validator.
	http.ServeContent(w, r, "", time.Time{}, blob)
}

// contentType is a file's type by its name; an image is bytes.
func contentType(name string) string {
	base := path.Base(name)
	switch {
	case strings.HasSuffix(base, ".json"):
		return "application/json"
	case base == "SHA256SUMS", strings.HasSuffix(base, ".txt"), strings.HasSuffix(base, ".ipxe"), strings.HasPrefix(name, "pxelinux.cfg/"), strings.Contains(name, "/pxelinux.cfg/"):
		return "text/plain; charset=utf-8"
	}
	return "application/octet-stream"
}
