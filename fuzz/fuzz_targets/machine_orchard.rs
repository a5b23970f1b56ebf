#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| sandpipe_proto::orchard::fuzz(std::time::Instant::now(), data));
