// Package deb knows the formats of one Debian package: version strings and
// their ordering, deb822 control paragraphs, relationship fields (Depends,
// Provides, ...) and the .deb archive itself (ar with control.tar and
// data.tar members). It reads no repository and touches no tree.
package deb
