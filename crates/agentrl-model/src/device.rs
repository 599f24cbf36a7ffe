//! Which candle device a model is placed on: the first step before any weights are loaded
//! (device → weights → policy → episodes). The CPU is the default everywhere; a build with the
//! `cuda` feature (`scripts/build_cuda.sh`) can pick the GPU through [`best_device`].

use candle_core::Device;

/// The device a Qwen3 run should use: CUDA device 0 when this crate is built with the `cuda`
/// feature and the driver reports at least one GPU, the CPU otherwise.
///
/// Only "no GPU here" (zero devices, or the driver's `CUDA_ERROR_NO_DEVICE`) falls back to the
/// CPU. Any other driver error (a driver older than the toolkit the kernels were built with, a
/// GPU that fails to open) is returned, so a misconfigured GPU machine fails at start-up
/// instead of silently training on the CPU.
pub fn best_device() -> candle_core::Result<Device> {
    #[cfg(feature = "cuda")]
    {
        use candle_core::cuda_backend::cudarc::driver::{sys::CUresult, CudaContext, DriverError};
        match CudaContext::device_count() {
            Ok(count) if count > 0 => return Device::new_cuda(0),
            Ok(_) | Err(DriverError(CUresult::CUDA_ERROR_NO_DEVICE)) => {}
            Err(driver_error) => {
                return Err(candle_core::Error::Cuda(Box::new(driver_error))
                    .context("counting CUDA devices for best_device"))
            }
        }
    }
    Ok(Device::Cpu)
}
