package mirror

import (
	"errors"
	"io/fs"
	"path/filepath"
)

// Empty reports whether the mirror has no references yet, i.e. the next
// fetch is in effect a clone.
func (m *Mirror) Empty() bool {
	it, err := m.repo.NewReferenceIterator()
	if err != nil {
		return true
	}
	defer it.Free()
	_, err = it.Next()
	return err != nil
}

// Size returns the bytes the cache holds on disk.
func (c *Cache) Size() (int64, error) {
	var n int64
	err := filepath.WalkDir(c.dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n, err
}
