-- Small step outputs live in their journal row: a one-byte output is smaller than the
-- 32-byte reference to a blob, and one page is written per step instead of three. Large
-- outputs stay in `blobs`, stored once by hash.
ALTER TABLE journal ADD COLUMN value BLOB;
