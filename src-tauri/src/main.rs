// No console window on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    #[cfg(target_os = "linux")]
    software_rendering_without_compositing();
    hearth_app::run()
}

/// With no GPU render node, WebKitGTK composites through software OpenGL
/// (llvmpipe), which costs a streaming reply most of a core: time the
/// model's threads then lose. Plain software painting costs a fraction of
/// that. A user's own setting of the variable wins.
#[cfg(target_os = "linux")]
fn software_rendering_without_compositing() {
    const VAR: &str = "WEBKIT_DISABLE_COMPOSITING_MODE";
    let has_render_node = std::fs::read_dir("/dev/dri")
        .map(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with("renderD")))
        .unwrap_or(false);
    if !has_render_node && std::env::var_os(VAR).is_none() {
        // Before any other thread exists, so nothing reads the environment concurrently.
        std::env::set_var(VAR, "1");
    }
}
