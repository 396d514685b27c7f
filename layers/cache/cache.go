// Package cache is the content-addressed store every downloaded or hashed
// input goes through.
package cache

// Cache is a content-addressed store on disk.
type Cache struct {
	dir string
}
