//! Compiles `taskforce/v1/*.proto` with the pure-Rust `protox` (no `protoc` needed) and writes a
//! file descriptor set for server reflection.

use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["taskforce/v1/registry.proto", "taskforce/v1/executor.proto"];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let mut compiler = protox::Compiler::new(["."])?;
    compiler.include_imports(true).include_source_info(true);
    compiler.open_files(protos)?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out.join("taskforce_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
