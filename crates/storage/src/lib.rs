pub fn _placeholder() { let _ = rocksdb::Options::default(); }
