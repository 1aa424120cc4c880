// #[wire_codec] bodies: what the translator cannot take, at its span.

#[jitccl_macros::wire_codec]
mod calls_a_function {
    pub fn encode(value: f32) -> u8 {
        f32::round(value) as u8
    }
    pub fn decode(code: u8) -> f32 {
        code as f32
    }
}

#[jitccl_macros::wire_codec]
mod bits_of_a_code {
    pub fn encode(value: f32) -> u8 {
        value as u8
    }
    pub fn decode(code: u8) -> f32 {
        f32::from_bits(code.to_bits())
    }
}

#[jitccl_macros::wire_codec]
mod from_bits_of_a_byte {
    pub fn encode(value: f32) -> u8 {
        value as u8
    }
    pub fn decode(code: u8) -> f32 {
        f32::from_bits(code)
    }
}

#[jitccl_macros::wire_codec]
mod shifts_a_float {
    pub fn encode(value: f32) -> u8 {
        (value << 1) as u8
    }
    pub fn decode(code: u8) -> f32 {
        code as f32
    }
}

#[jitccl_macros::wire_codec]
mod wrong_result {
    pub fn encode(value: f32) -> u8 {
        value
    }
    pub fn decode(code: u8) -> f32 {
        code as f32
    }
}

#[jitccl_macros::wire_codec]
mod loops {
    pub fn encode(value: f32) -> u8 {
        let mut q = 0u8;
        while (q as f32) < value {
            q = q + 1;
        }
        q
    }
    pub fn decode(code: u8) -> f32 {
        code as f32
    }
}

fn main() {}
