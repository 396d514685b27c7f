// Package repo reads a Debian repository: the Release file of each suite
// (signed InRelease verified against a keyring, or plain Release when the
// repository is trusted), the Packages indexes it lists, each checked
// against the SHA256 the Release gives, and the .deb files, each checked
// against the SHA256 its Packages entry gives. Everything is read through a
// Fetcher (the build's content-addressed cache), so a verified index or
// .deb is never downloaded twice.
package repo
