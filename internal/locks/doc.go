// Package locks holds per-device locks of a kubelet plugin, within the process and, through
// lock files in the state directory, across the two plugin processes of a rolling update. Keys
// are taken in sorted order, so operations on overlapping devices cannot deadlock.
package locks
