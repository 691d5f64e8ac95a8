"""One loader per source; each documents its columns (units in names) and fails fast."""
